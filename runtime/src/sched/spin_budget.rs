//! A worker's budget for busy-waiting by default: the brief spin of an idle
//! worker before it parks, and the spin ahead of its own tasks' sleeps.
//!
//! Both spins trade CPU for latency (a parked worker needs an OS wake-up,
//! tens of µs on a VM), and both are cheap when they are rare. When they
//! are not (thousands of sleeps a second, each due within the sleep spin of
//! the next; work that comes every few tens of µs), unbudgeted they keep a
//! core busy. So a worker spins by default only while it has credit: credit
//! accrues at [`SHARE`] of the time that passes (2 % of a core), up to
//! [`CREDIT_MAX`], and spinning spends it. Out of credit, the worker parks
//! at once and is woken by the work, or by the timer thread for a sleep:
//! late by an OS wake-up, and cheap. The opt-ins, `Builder::sleep_spin` and
//! `Builder::idle_poll` set by the user, are not budgeted: there the user
//! asked for a core.
//!
//! Per worker, touched only by its thread: two `Cell`s.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The share of elapsed time a worker may spend spinning by default: 1/50,
/// 2 % of a core.
const SHARE: u32 = 50;
/// The most credit saved up: a burst of spins after a quiet spell (fifty
/// brief idle spins, or a few sleep spins).
pub(crate) const CREDIT_MAX: Duration = Duration::from_millis(1);

/// See the module docs.
#[derive(Debug)]
pub(crate) struct SpinBudget {
    /// Spin time available at `at`.
    credit: Cell<Duration>,
    at: Cell<Instant>,
}

impl SpinBudget {
    /// A full budget.
    pub(crate) fn new(now: Instant) -> Self {
        SpinBudget {
            credit: Cell::new(CREDIT_MAX),
            at: Cell::new(now),
        }
    }

    /// The credit at `t` (no earlier than the last charge).
    fn credit_at(&self, t: Instant) -> Duration {
        let earned = t.saturating_duration_since(self.at.get()) / SHARE;
        (self.credit.get() + earned).min(CREDIT_MAX)
    }

    /// Whether the credit at `t` covers a spin of `d`.
    pub(crate) fn covers(&self, t: Instant, d: Duration) -> bool {
        self.credit_at(t) >= d
    }

    /// Spends `spun`, ending at `now`.
    pub(crate) fn charge(&self, now: Instant, spun: Duration) {
        let credit = self.credit_at(now).saturating_sub(spun);
        self.credit.set(credit);
        self.at.set(now.max(self.at.get()));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn spins_are_paid_for_and_credit_comes_back_with_time() {
        let t0 = Instant::now();
        let b = SpinBudget::new(t0);
        assert!(b.covers(t0, CREDIT_MAX));
        assert!(!b.covers(t0, CREDIT_MAX + Duration::from_nanos(1)));
        b.charge(t0, CREDIT_MAX);
        assert!(!b.covers(t0, Duration::from_micros(1)), "spent");
        // 2 % of the time that passes comes back.
        let later = t0 + Duration::from_millis(10);
        assert!(b.covers(later, Duration::from_micros(200)));
        assert!(!b.covers(later, Duration::from_micros(201)));
        // Never more than the cap, however long the worker was idle.
        let much_later = t0 + Duration::from_secs(3600);
        assert!(b.covers(much_later, CREDIT_MAX));
        assert!(!b.covers(much_later, CREDIT_MAX + Duration::from_nanos(1)));
    }

    #[test]
    fn a_worker_that_spins_all_the_time_spins_two_percent_of_it() {
        // Each millisecond it asks for a 150 µs spin ahead of a sleep: it
        // gets the saved-up credit, then one spin per 7.5 ms.
        let t0 = Instant::now();
        let b = SpinBudget::new(t0);
        let spin = Duration::from_micros(150);
        let mut spun = Duration::ZERO;
        for ms in 0..1000u64 {
            let t = t0 + Duration::from_millis(ms);
            if b.covers(t, spin) {
                b.charge(t, spin);
                spun += spin;
            }
        }
        // 1 s at 2 %, plus the initial credit.
        assert!(
            spun <= Duration::from_millis(20) + CREDIT_MAX + spin,
            "{spun:?}"
        );
        assert!(spun >= Duration::from_millis(18), "{spun:?}");
    }
}
