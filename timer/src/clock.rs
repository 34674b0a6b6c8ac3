//! Deadlines as `u64` nanoseconds on the monotonic clock.
//!
//! Every deadline in the timer is a count of nanoseconds since a process-wide
//! base [`Instant`], set the first time any timer code asks for it to a day
//! before then (an `Instant` may lie before the machine's boot: it is only
//! ever compared and subtracted here), so that instants taken before the
//! first timer call still encode exactly: a periodic timer's `first` keeps
//! its cadence. `u64`
//! nanoseconds last 584 years, so the encoding is total:
//!
//! - an `Instant` before the base (or equal to it) becomes `0`, which is
//!   always due; a periodic timer's `first` that early is moved to the first
//!   point of its own grid at or after the base instead
//!   ([`first_period_ns`], in `u128` arithmetic, so for any `Instant` the
//!   platform can represent), so that its runs keep `first + k * period`;
//! - an `Instant` more than 584 years after the base saturates to [`NEVER`],
//!   a valid deadline that never comes (the timer can still be cancelled or
//!   rescheduled). Nothing here overflows or panics, whatever the `Instant`.
//!
//! `Instant` is `CLOCK_MONOTONIC` on Linux: unlike bthread's wall-clock
//! deadlines, a change of the system time does not move timers.
//!
//! Under `--cfg loom` there is no clock: [`now_ns`] returns `LOOM_NOW`, so
//! that any deadline a model builds from `Instant::now()` plus a little is
//! due, and [`NEVER`] never is.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The deadline that never comes.
pub(crate) const NEVER: u64 = u64::MAX;

/// What [`now_ns`] returns under loom: ~146 years after the base, later than
/// any deadline a model computes from the real clock, earlier than [`NEVER`].
#[cfg(loom)]
pub(crate) const LOOM_NOW: u64 = 1 << 62;

/// The process-wide origin of deadlines.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(86_400)).unwrap_or(now)
    })
}

/// `d` in nanoseconds, saturating at [`NEVER`].
#[inline]
pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(NEVER)
}

/// The deadline encoding of `deadline`: 0 if it is not after the base,
/// [`NEVER`] if it is beyond `u64` nanoseconds from it. (Public, hidden,
/// for the runtime's words that keep a deadline in a `u64`.)
#[inline]
pub fn deadline_ns(deadline: Instant) -> u64 {
    match deadline.checked_duration_since(base()) {
        Some(d) => duration_ns(d),
        None => 0,
    }
}

/// The current time as a deadline.
#[cfg(not(loom))]
#[inline]
pub(crate) fn now_ns() -> u64 {
    deadline_ns(Instant::now())
}

/// The current time as a deadline: a constant under loom (see the module docs).
#[cfg(loom)]
#[inline]
pub(crate) fn now_ns() -> u64 {
    LOOM_NOW
}

/// The `Instant` of a deadline, for an absolute futex wait. `None` for
/// [`NEVER`] or a deadline the platform's `Instant` cannot represent (both
/// mean "wait without a timeout").
#[inline]
pub fn instant_of(deadline: u64) -> Option<Instant> {
    if deadline == NEVER {
        return None;
    }
    base().checked_add(Duration::from_nanos(deadline))
}

/// The next deadline of a periodic timer that was due at `due` and has just
/// run at `now`.
///
/// Keeps the cadence: the result is `due + k * period` for the smallest
/// `k >= 1` that lies after `now`. A timer that ran late therefore skips the
/// periods it missed instead of firing a burst of catch-up calls (Go's ticker
/// does the same), and never drifts by its own lateness. Saturates at
/// [`NEVER`].
#[inline]
pub(crate) fn next_period(due: u64, period: u64, now: u64) -> u64 {
    debug_assert!(period > 0);
    let next = due.saturating_add(period);
    if next > now || next == NEVER {
        return next;
    }
    // `now >= next > due`, so `now - due >= period` and at least one whole
    // period was missed.
    let missed = (now - due) / period;
    due.saturating_add(period.saturating_mul(missed.saturating_add(1)))
}

/// The deadline of a periodic timer's first run at `first`, every `period`:
/// `first` itself if the encoding holds it, else, for a `first` before the
/// base, the first point `first + k * period` at or after the base. (A
/// plain 0 would put every later run on the base's grid, up to a period
/// away from `first`'s.) With a period of up to a day that point is due at
/// once; a longer period's may lie ahead, and the runs before it are
/// skipped, as a late timer's are ([`next_period`]).
///
/// The phase is computed in `u128` nanoseconds, from the exact distance
/// and period: any `Instant` lies within `u64::MAX` seconds of the base, so
/// both fit, and `first` keeps its grid however far back it lies (the
/// earliest `Instant` the platform can represent is some 292 billion years
/// back, where a distance in `u64` ns would have saturated and moved the
/// grid). A point beyond the encoding saturates to [`NEVER`].
pub(crate) fn first_period_ns(first: Instant, period: Duration) -> u64 {
    match base().checked_duration_since(first) {
        Some(before) if !before.is_zero() => grid_after_base(before.as_nanos(), period.as_nanos()),
        _ => deadline_ns(first),
    }
}

/// The first point of a grid of `period` ns at or after the base, in ns
/// after it, for a grid through an instant `before` ns before the base;
/// [`NEVER`] if that point lies beyond the encoding.
fn grid_after_base(before: u128, period: u128) -> u64 {
    debug_assert!(period > 0);
    match before % period {
        0 => 0,
        r => u64::try_from(period - r).unwrap_or(NEVER),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_past_is_due_and_the_far_future_is_never() {
        let now = Instant::now();
        let _ = deadline_ns(now); // make sure the base exists
        if let Some(past) = base().checked_sub(Duration::from_secs(3600)) {
            assert_eq!(deadline_ns(past), 0);
        }
        assert_eq!(deadline_ns(base()), 0);
        if let Some(far) = now.checked_add(Duration::from_secs(1 << 40)) {
            assert_eq!(deadline_ns(far), NEVER);
        }
        assert_eq!(duration_ns(Duration::MAX), NEVER);
        assert_eq!(duration_ns(Duration::from_nanos(7)), 7);
    }

    /// Instants taken shortly before the first timer call still encode
    /// exactly (a periodic timer's `first`, say): the base lies a day
    /// before the first call, not at its own `now`, which would make them
    /// all 0.
    #[test]
    fn instants_from_before_the_first_call_are_not_clamped() {
        let earlier = Instant::now();
        let later = earlier + Duration::from_millis(1);
        assert_eq!(deadline_ns(later) - deadline_ns(earlier), 1_000_000);
        if let Some(second_ago) = Instant::now().checked_sub(Duration::from_secs(2)) {
            assert!(base() < second_ago);
        }
    }

    #[test]
    fn deadlines_follow_the_clock() {
        let a = now_ns();
        let b = deadline_ns(Instant::now() + Duration::from_millis(5));
        assert!(b >= a + 5_000_000);
        assert_eq!(instant_of(NEVER), None);
        let i = Instant::now() + Duration::from_millis(3);
        let back = instant_of(deadline_ns(i)).unwrap();
        assert_eq!(back, i);
    }

    /// A `first` too far back for `u64` nanoseconds from the base (down to
    /// the earliest `Instant`) keeps its grid: its first deadline is a
    /// point `first + k * period`, exactly, within a period after the base.
    #[test]
    fn any_representable_first_keeps_its_grid() {
        let _ = now_ns(); // make sure the base exists
        let earliest = spindle_testkit::earliest_instant();
        assert!(earliest.checked_sub(Duration::from_nanos(1)).is_none());
        let year = Duration::from_secs(365 * 86_400);
        let mut firsts = vec![
            earliest,
            earliest + Duration::from_nanos(1),
            earliest + Duration::from_millis(400) / 3,
        ];
        for back in [600 * year, 1_000_000 * year, Duration::from_nanos(u64::MAX)] {
            if let Some(first) = base().checked_sub(back + Duration::from_nanos(123_456_789)) {
                firsts.push(first);
            }
        }
        let periods = [
            Duration::from_millis(400),
            Duration::from_nanos(7),
            Duration::from_secs(86_400) + Duration::from_nanos(1),
            Duration::from_secs(1000 * 365 * 86_400),
        ];
        for &first in &firsts {
            for &period in &periods {
                let due = first_period_ns(first, period);
                let p = period.as_nanos();
                if due == NEVER {
                    // Only a point beyond the encoding saturates.
                    assert!(p > u128::from(NEVER), "{first:?} every {period:?}: NEVER");
                    continue;
                }
                assert!(
                    u128::from(due) < p,
                    "{first:?} every {period:?}: {due} ns after the base, not within a period"
                );
                let at = instant_of(due).expect("a deadline within a period of the base");
                let since_first = at.duration_since(first).as_nanos();
                assert_eq!(
                    since_first % p,
                    0,
                    "{first:?} every {period:?}: {due} ns after the base is off the grid"
                );
            }
        }
        // A period beyond the encoding whose next point lies beyond it too.
        assert_eq!(first_period_ns(earliest, Duration::MAX), NEVER);
    }

    #[test]
    fn a_first_before_the_base_is_moved_onto_its_own_grid() {
        assert_eq!(grid_after_base(30, 10), 0);
        assert_eq!(grid_after_base(25, 10), 5);
        assert_eq!(grid_after_base(1, 10), 9);
        assert_eq!(grid_after_base(7, 1000), 993);
        let period = Duration::from_millis(7);
        let period_ns = duration_ns(period);
        let _ = now_ns(); // make sure the base exists
                          // 3.25 periods before the base: the 4th point is 0.75 periods after.
        if let Some(first) = base().checked_sub(period * 13 / 4) {
            let due = first_period_ns(first, period);
            assert_eq!(due, deadline_ns(first + period * 4));
            assert!(due > 0 && due < period_ns, "{due}");
            // Its later runs stay on `first`'s grid.
            let later = next_period(due, period_ns, due + 3 * period_ns + 1);
            assert_eq!(later, deadline_ns(first + period * 8));
        }
        // On the base, and after it: the plain encoding.
        assert_eq!(first_period_ns(base(), period), 0);
        let soon = Instant::now() + period;
        assert_eq!(first_period_ns(soon, period), deadline_ns(soon));
    }

    #[test]
    fn periods_keep_their_cadence_and_skip_what_was_missed() {
        // On time: the next one period later.
        assert_eq!(next_period(100, 10, 100), 110);
        assert_eq!(next_period(100, 10, 105), 110);
        // Late by more than a period: skip to the next point of the grid.
        assert_eq!(next_period(100, 10, 110), 120);
        assert_eq!(next_period(100, 10, 137), 140);
        // Saturation instead of overflow.
        assert_eq!(next_period(NEVER - 1, 10, 0), NEVER);
        assert_eq!(next_period(5, u64::MAX, 6), NEVER);
        assert_eq!(next_period(0, 3, NEVER - 1), NEVER);
    }
}
