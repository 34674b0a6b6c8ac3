//! `Barrier`: std's barrier for tasks and threads, reusable, with waits
//! that can give up.
//!
//! One 64-bit word holds the generation (high half) and the arrivals in it
//! (low half). An arrival is a CAS that adds 1; the last arrival instead
//! moves the word to the next generation with no arrivals, in the same
//! CAS, so it is the leader and no arrival can slip into a generation that
//! has tripped. It then bumps a butex, a count of trips, and wakes every
//! waiter; a waiter waits on that butex and is through once the word's
//! generation is no longer its own (a trip count that lags, or a trip of
//! a later generation, wakes it to look again, never lets it through).
//!
//! A waiter whose wait fails (its deadline, the enclosing scope's, or an
//! unwind at the runtime's stop) withdraws its arrival with a CAS that
//! takes 1 off, if its generation is still the word's: the barrier is as
//! if it had never come. If its generation tripped meanwhile, it is
//! through, and returns `Ok` as if its wait had not failed.

use crate::error::WaitError;
use crate::loom::sync::atomic::{AtomicU64, Ordering};
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::wait::{self, Butex};
use std::fmt;
use std::time::Instant;

/// A barrier: `n` parties wait until all of them have come, then all go on.
///
/// Reusable: the parties that came together form a generation, and the
/// next arrivals form the next. A barrier of 0 parties acts as one of 1,
/// as std's does: no wait blocks, and each is the leader. Waits honour an
/// enclosing [`with_deadline`](crate::with_deadline) scope (and
/// [`wait_until`](Self::wait_until)'s deadline), but are not ended by
/// `interrupt` or `stop`, like those of the locks (unlike those of the
/// semaphore and the channels).
///
/// ```
/// use spindle::sync::Barrier;
/// use std::sync::Arc;
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// let barrier = Arc::new(Barrier::new(3));
/// let leaders = rt.block_on(|| {
///     let parties: Vec<_> = (0..3)
///         .map(|_| {
///             let barrier = barrier.clone();
///             // Each waits until all three have come.
///             spindle::spawn(move || barrier.wait().unwrap().is_leader())
///         })
///         .collect();
///     parties.into_iter().map(|p| p.join().unwrap()).filter(|&l| l).count()
/// });
/// assert_eq!(leaders, 1); // one of them is told it is the leader
/// ```
pub struct Barrier {
    n: u32,
    /// Generation << 32 | arrivals in it.
    state: AtomicU64,
    /// How many generations have tripped (wrapping); waiters wait on it.
    trips: Butex,
}

/// What [`Barrier::wait`] returns: whether this party was the leader.
pub struct BarrierWaitResult {
    leader: bool,
}

impl BarrierWaitResult {
    /// Whether this party was the generation's leader: the last to come.
    /// Exactly one party of each generation is.
    pub fn is_leader(&self) -> bool {
        self.leader
    }
}

impl fmt::Debug for BarrierWaitResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BarrierWaitResult")
            .field("is_leader", &self.leader)
            .finish()
    }
}

const ARRIVALS: u64 = u32::MAX as u64;

fn generation(state: u64) -> u32 {
    (state >> 32) as u32
}

impl Barrier {
    /// A barrier for `n` parties. Panics if `n` passes `u32::MAX`.
    #[cfg(not(loom))]
    pub const fn new(n: usize) -> Self {
        Barrier {
            n: parties(n),
            state: AtomicU64::new(0),
            trips: Butex::new(0),
        }
    }

    /// A barrier for `n` parties (not const under loom).
    #[cfg(loom)]
    pub fn new(n: usize) -> Self {
        Barrier {
            n: parties(n),
            state: AtomicU64::new(0),
            trips: Butex::new(0),
        }
    }

    /// Waits until all `n` parties have come to the barrier. Fails only with
    /// `DeadlineExceeded`, when the deadline of an enclosing scope passes
    /// first: the arrival is then withdrawn, and the others still wait for
    /// `n` parties. (If the barrier trips while that happens, the wait
    /// returns `Ok`.)
    pub fn wait(&self) -> Result<BarrierWaitResult, WaitError> {
        self.wait_inner(None)
    }

    /// Like [`wait`](Self::wait), giving up with `TimedOut` at `deadline`.
    pub fn wait_until(&self, deadline: Instant) -> Result<BarrierWaitResult, WaitError> {
        self.wait_inner(Some(deadline))
    }

    fn wait_inner(&self, deadline: Option<Instant>) -> Result<BarrierWaitResult, WaitError> {
        let mut s = self.state.load(Ordering::Relaxed);
        let gen = loop {
            let gen = generation(s);
            if (s & ARRIVALS) + 1 >= u64::from(self.n) {
                // The last to come: trip, into the next generation.
                let next = u64::from(gen.wrapping_add(1)) << 32;
                match self
                    .state
                    .compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Relaxed)
                {
                    Ok(_) => {
                        self.trips.value().fetch_add(1, Ordering::Release);
                        self.trips.wake_all();
                        return Ok(BarrierWaitResult { leader: true });
                    }
                    Err(now) => s = now,
                }
            } else {
                match self.state.compare_exchange_weak(
                    s,
                    s + 1,
                    Ordering::Release,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break gen,
                    Err(now) => s = now,
                }
            }
        };
        // Withdraws the arrival if the wait fails, or unwinds.
        let arrival = Arrival { barrier: self, gen };
        loop {
            // The trip count before the generation: a trip after this look
            // bumps it, and our wait then returns at once.
            let trips = self.trips.value().load(Ordering::Acquire);
            if generation(self.state.load(Ordering::Acquire)) != gen {
                std::mem::forget(arrival);
                return Ok(BarrierWaitResult { leader: false });
            }
            match wait::wait(
                self.trips.queue(),
                trips,
                deadline,
                WaitPolicy::Uninterruptible,
                WaitKind::Barrier,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => {
                    std::mem::forget(arrival);
                    return if self.withdraw(gen) {
                        Err(e)
                    } else {
                        Ok(BarrierWaitResult { leader: false })
                    };
                }
            }
        }
    }

    /// Takes an arrival of generation `gen` back, if `gen` has not tripped;
    /// returns whether it did.
    fn withdraw(&self, gen: u32) -> bool {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if generation(s) != gen {
                return false;
            }
            debug_assert_ne!(s & ARRIVALS, 0, "a withdrawal without an arrival");
            match self
                .state
                .compare_exchange_weak(s, s - 1, Ordering::Relaxed, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }
}

/// `n` parties as the barrier counts them: 0 as 1, as std's barrier does.
const fn parties(n: usize) -> u32 {
    assert!(
        n <= u32::MAX as usize,
        "a barrier of more than u32::MAX parties"
    );
    if n == 0 {
        1
    } else {
        n as u32
    }
}

/// An arrival that is withdrawn on drop (when its wait unwinds).
struct Arrival<'a> {
    barrier: &'a Barrier,
    gen: u32,
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.barrier.withdraw(self.gen);
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.load(Ordering::Relaxed);
        f.debug_struct("Barrier")
            .field("parties", &self.n)
            .field("arrived", &(s & ARRIVALS))
            .field("generation", &generation(s))
            .finish()
    }
}
