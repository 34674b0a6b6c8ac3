//! Adaptive idle polling: how long a worker with nothing to run keeps
//! looking for work before it parks. Opt-in (`Builder::idle_poll`, whose
//! bound is `max` here): by default `max` is `min`, the brief spin every
//! idle worker does, and nothing adapts.
//!
//! Waking a parked worker is a futex wake-up, and on a VM that means waking
//! a halted vCPU through the host: 5-10 µs, and milliseconds now and then
//! when the host is busy. A worker still looking when the work comes (a
//! task woken from another thread, say the reply its RPC waited for) takes
//! it in about a microsecond. Looking costs CPU, so each worker adapts how
//! long it looks to how soon work has been coming, as KVM adapts its halt
//! polling ([`next_window`]):
//!
//! - work that came while the worker looked leaves the window as it is;
//! - work that came after the window but within `max` of going idle doubles
//!   it (up to `max`): the next gap is likely as short;
//! - work that came later than `max` halves it (down to `min`): looking
//!   longer would have been wasted this time. Halving rather than going
//!   back to `min` at once lets a stream of short gaps with a long one now
//!   and then keep its window.
//!
//! So a worker idle for long soon looks for only `min` per idle stretch
//! before it parks (after five long stretches from `max`), and one serving
//! a stream of requests with gaps under `max` looks through each gap, a
//! core's worth of CPU for the latency of a poll. The
//! window is per worker and touched only by its thread: two `Cell`s and a
//! clock read per idle stretch, nothing on the path of a busy worker.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The next polling window, after an idle stretch of `idle` ended by work
/// while the window was `window`. See the module docs.
pub(crate) fn next_window(
    window: Duration,
    idle: Duration,
    min: Duration,
    max: Duration,
) -> Duration {
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
    /// When the current idle stretch began; `None` while there is work.
    idle_since: Cell<Option<Instant>>,
}

impl PollWindow {
    /// A window that starts at `min` and grows to at most `max` (taken as
    /// `min` if shorter).
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        PollWindow {
            min,
            max: max.max(min),
            window: Cell::new(min),
            idle_since: Cell::new(None),
        }
    }

    /// The worker found nothing to run at `now`: until when it should keep
    /// looking before it parks. The first call of an idle stretch starts it.
    pub(crate) fn look_until(&self, now: Instant) -> Instant {
        let since = self.idle_since.get().unwrap_or(now);
        self.idle_since.set(Some(since));
        since.checked_add(self.window.get()).unwrap_or(now)
    }

    /// The worker has work again: ends the idle stretch, if it was in one,
    /// and adapts the window to its length.
    #[inline]
    pub(crate) fn work_found(&self) {
        if let Some(since) = self.idle_since.take() {
            let idle = since.elapsed();
            self.window
                .set(next_window(self.window.get(), idle, self.min, self.max));
        }
    }

    /// The current window.
    #[cfg(all(test, not(loom)))]
    fn window(&self) -> Duration {
        self.window.get()
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
    fn a_max_below_min_keeps_the_window_at_min() {
        let w = PollWindow::new(MIN, Duration::ZERO);
        let now = Instant::now();
        assert_eq!(w.look_until(now), now + MIN);
        std::thread::sleep(Duration::from_millis(1));
        w.work_found();
        assert_eq!(w.window(), MIN);
    }

    #[test]
    fn an_idle_stretch_is_timed_from_its_first_look() {
        let w = PollWindow::new(MIN, MAX);
        let first = Instant::now();
        assert_eq!(w.look_until(first), first + MIN);
        // A later look of the same stretch (after a park) keeps its start.
        assert_eq!(w.look_until(first + us(500)), first + MIN);
        w.work_found();
        // The stretch is over: the next starts afresh.
        let later = first + us(1000);
        assert_eq!(w.look_until(later), later + w.window());
    }

    #[test]
    fn work_found_outside_an_idle_stretch_changes_nothing() {
        let w = PollWindow::new(MIN, MAX);
        w.work_found();
        assert_eq!(w.window(), MIN);
    }
}
