//! Adaptive idle polling: how long a worker with nothing to run keeps
//! looking for work before it parks. Opt-in (`Builder::idle_poll`, whose
//! bound is `max` here); by default `max` is `min`, the brief spin every
//! idle worker does each time it looks, and nothing adapts.
//!
//! Waking a parked worker is a futex wake-up, and on a VM that means waking
//! a halted vCPU through the host: 5-10 µs, and milliseconds now and then
//! when the host is busy. A worker still looking when the work comes (a
//! task woken from another thread, say the reply its RPC waited for) takes
//! it in about a microsecond. Looking costs CPU, so each worker adapts how
//! long it looks to how soon work has been coming, as KVM adapts its halt
//! polling ([`next_window`]). An *idle stretch* runs from the worker's first
//! fruitless look to the next work that comes, parks included:
//!
//! - work that came within the window (counted from the stretch's first
//!   look) leaves it as it is;
//! - work that came after the window but within `max` of going idle doubles
//!   it (up to `max`): the next gap is likely as short;
//! - work that came later than `max` halves it (down to `min`): looking
//!   longer would have been wasted this time. Halving rather than going
//!   back to `min` at once lets a stream of short gaps with a long one now
//!   and then keep its window.
//!
//! A task whose wait its own timer ended (a sleep, a timed-out wait) is
//! not work that came: when a timer fires is known in advance (and the
//! worker polls for its own tasks' sleeps anyway, `Builder::sleep_spin`).
//! Running it does not end the stretch, which goes on, timed from its first
//! fruitless look after the last work that came: so a worker whose only
//! activity is a periodic sleeper
//! looks for one window after the last real work, then only spins and
//! parks around the sleeps.
//!
//! The window changes only when work ends a stretch. Once traffic stops,
//! the worker looks for one window and parks; it looks that long again in
//! the next stretch, and the window halves only when work comes after
//! more than `max`. The window is per worker and touched only by its
//! thread: two `Cell`s, and a clock read when a stretch ends; by default
//! no clock read and no state change.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Bounds beyond this are taken as this: an hour of polling is forever
/// enough, and keeps `Instant` arithmetic in range.
const LONGEST: Duration = Duration::from_secs(3600);

/// The next polling window, after an idle stretch of `idle` ended by work
/// while the window was `window`. See the module docs.
fn next_window(window: Duration, idle: Duration, min: Duration, max: Duration) -> Duration {
    if idle <= window {
        window
    } else if idle <= max {
        window.saturating_mul(2).clamp(min, max)
    } else {
        (window / 2).max(min)
    }
}

/// A worker's polling window and the idle stretch it is in.
#[derive(Debug)]
pub(crate) struct PollWindow {
    min: Duration,
    max: Duration,
    window: Cell<Duration>,
    /// When the current idle stretch began; `None` while there is work,
    /// and always when the window cannot adapt (`max == min`).
    idle_since: Cell<Option<Instant>>,
}

impl PollWindow {
    /// A window that starts at `min` and grows to at most `max` (taken as
    /// `min` if shorter, and as an hour if longer).
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        PollWindow {
            min,
            max: max.clamp(min, LONGEST.max(min)),
            window: Cell::new(min),
            idle_since: Cell::new(None),
        }
    }

    pub(crate) fn adapts(&self) -> bool {
        self.max > self.min
    }

    /// The worker, at `now`, found nothing to run: until when it should
    /// keep looking before it parks. The end of the window, counted from the
    /// first look of the stretch, but at least `min` from now: each look
    /// after a park that found nothing spins as every idle worker does.
    pub(crate) fn look_until(&self, now: Instant) -> Instant {
        let spin = now + self.min;
        if !self.adapts() {
            return spin;
        }
        let since = self.idle_since.get().unwrap_or(now);
        self.idle_since.set(Some(since));
        (since + self.window.get()).max(spin)
    }

    /// The worker found a task to run, ending the idle stretch if it was
    /// in one: adapts the window to the stretch's length. Unless the task
    /// was `woken_by_timer`: then the stretch goes on, timed from its first
    /// look, through the runs of such tasks.
    pub(crate) fn work_found(&self, woken_by_timer: bool) {
        if woken_by_timer {
            return;
        }
        if let Some(since) = self.idle_since.take() {
            let idle = since.elapsed();
            self.window
                .set(next_window(self.window.get(), idle, self.min, self.max));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_micros(20);
    const MAX: Duration = Duration::from_micros(200);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn work_within_the_window_leaves_it_alone() {
        assert_eq!(next_window(us(80), us(5), MIN, MAX), us(80));
        assert_eq!(next_window(us(80), us(80), MIN, MAX), us(80));
    }

    #[test]
    fn work_soon_after_the_window_doubles_it_up_to_max() {
        assert_eq!(next_window(MIN, us(50), MIN, MAX), us(40));
        assert_eq!(next_window(us(40), us(50), MIN, MAX), us(80));
        assert_eq!(next_window(us(160), us(190), MIN, MAX), MAX);
        assert_eq!(next_window(MAX, MAX, MIN, MAX), MAX);
    }

    #[test]
    fn work_later_than_max_halves_it_down_to_min() {
        assert_eq!(next_window(MAX, MAX + us(1), MIN, MAX), us(100));
        assert_eq!(
            next_window(us(100), Duration::from_secs(10), MIN, MAX),
            us(50)
        );
        assert_eq!(next_window(us(30), Duration::from_secs(10), MIN, MAX), MIN);
        assert_eq!(next_window(MIN, Duration::from_secs(10), MIN, MAX), MIN);
    }

    #[test]
    fn a_max_below_min_keeps_the_window_at_min_and_tracks_nothing() {
        let w = PollWindow::new(MIN, Duration::ZERO);
        let now = Instant::now();
        assert_eq!(w.look_until(now), now + MIN);
        assert_eq!(w.idle_since.get(), None, "no clock read when it ends");
        w.work_found(false);
        assert_eq!(w.window.get(), MIN);
    }

    #[test]
    fn an_idle_stretch_is_timed_from_its_first_look() {
        let w = PollWindow::new(MIN, MAX);
        w.window.set(us(100));
        let first = Instant::now();
        assert_eq!(w.look_until(first), first + us(100));
        // A later look of the same stretch keeps its start...
        assert_eq!(w.look_until(first + us(30)), first + us(100));
        // ...but always spins for `min`, as after a park that found nothing.
        assert_eq!(w.look_until(first + us(500)), first + us(500) + MIN);
        w.work_found(false);
        // The stretch is over: the next starts afresh.
        let later = Instant::now() + us(1000);
        assert_eq!(w.look_until(later), later + w.window.get());
    }

    #[test]
    fn a_task_woken_by_its_timer_neither_adapts_nor_ends_the_stretch() {
        let w = PollWindow::new(MIN, Duration::from_secs(1));
        w.window.set(us(100));
        let first = Instant::now();
        w.look_until(first);
        std::thread::sleep(Duration::from_millis(2));
        w.work_found(true);
        assert_eq!(w.window.get(), us(100));
        // The next look is of the same stretch: its window has passed.
        let now = Instant::now();
        assert_eq!(w.look_until(now), now + MIN);
        // Work that comes now ends it, timed from its first look.
        w.work_found(false);
        assert_eq!(w.window.get(), us(200));
    }

    #[test]
    fn a_stretch_ended_by_work_adapts_the_window() {
        let w = PollWindow::new(MIN, Duration::from_secs(1));
        w.look_until(Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        w.work_found(false);
        assert_eq!(w.window.get(), MIN * 2);
    }

    #[test]
    fn work_found_outside_an_idle_stretch_changes_nothing() {
        let w = PollWindow::new(MIN, MAX);
        w.work_found(false);
        assert_eq!(w.window.get(), MIN);
    }

    #[test]
    fn endless_bounds_stay_in_the_clock_range() {
        let w = PollWindow::new(MIN, Duration::MAX);
        w.window.set(Duration::MAX.min(LONGEST));
        let now = Instant::now();
        assert_eq!(w.look_until(now), now + LONGEST);
        assert_eq!(
            next_window(LONGEST, Duration::MAX, MIN, LONGEST),
            LONGEST / 2
        );
    }
}
