//! A periodic timer runs on its grid `first + k * period` whatever `first`
//! is, down to the earliest `Instant` the platform can represent (some 292
//! billion years back on Linux, where the distance to the timer's base no
//! longer fits `u64` nanoseconds).
//!
//! A run is never early, only late: a run on the grid lies a little after
//! a grid point, `(run - first) % period` small. A timer off its grid runs
//! at a fixed offset from it, whatever its lateness. So each timer runs
//! until one of its runs lands within `ON_GRID` of a grid point (the grid
//! points computed exactly, in `u128` nanoseconds), or until `MAX_RUNS`:
//! a busy machine only delays that moment, and a timer off its grid never
//! reaches it.

mod common;

use common::{ago, timer, LONG};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_millis(400);

/// How close to a grid point a run on time lands: lateness only (the
/// timer fires within microseconds when its thread gets a CPU).
const ON_GRID: Duration = Duration::from_millis(20);

/// Runs per timer before the test calls it off its grid: 10 s of runs.
const MAX_RUNS: usize = 25;

/// Where `run` lies after the last point of `first`'s grid at or before
/// it, and that point's index `k`.
fn past_grid_point(first: Instant, run: Instant) -> (Duration, u128) {
    let since = run.duration_since(first).as_nanos();
    let period = PERIOD.as_nanos();
    let k = since / period;
    let offset = since - k * period;
    (Duration::from_nanos(offset as u64), k)
}

#[test]
fn the_earliest_instant_is_the_floor_of_instant() {
    let earliest = spindle_testkit::earliest_instant();
    assert!(earliest.checked_sub(Duration::from_nanos(1)).is_none());
    assert!(earliest <= Instant::now());
}

#[test]
fn runs_keep_the_grid_of_any_representable_first() {
    let earliest = spindle_testkit::earliest_instant();
    let now = Instant::now();
    let year = Duration::from_secs(365 * 86_400);
    let odd = Duration::from_nanos(123_456_789);
    let mut firsts = vec![
        ("the earliest instant", earliest),
        (
            "a nanosecond after the earliest",
            earliest + Duration::from_nanos(1),
        ),
        (
            "a third of a period after the earliest",
            earliest + PERIOD / 3,
        ),
        (
            "three days and a bit ago",
            ago(3 * Duration::from_secs(86_400) + odd),
        ),
    ];
    // Beyond `u64` nanoseconds (584 years) from the timer's base, and far
    // beyond, where the platform can represent them.
    for (name, back) in [
        ("600 years and a bit ago", 600 * year + odd),
        ("a million years and a bit ago", 1_000_000 * year + odd),
        ("2^63 ns and a bit ago", Duration::from_nanos(1 << 63) + odd),
    ] {
        if let Some(first) = now.checked_sub(back) {
            firsts.push((name, first));
        }
    }

    let timer = timer();
    let (tx, rx) = mpsc::channel();
    let ids: Vec<_> = firsts
        .iter()
        .enumerate()
        .map(|(i, &(_, first))| {
            let tx = tx.clone();
            timer
                .schedule_periodic(first, PERIOD, move || {
                    let _ = tx.send((i, Instant::now()));
                })
                .expect("schedule a periodic timer")
        })
        .collect();

    // Per timer: its runs, and whether one landed on its grid.
    let mut runs: Vec<Vec<Instant>> = vec![Vec::new(); firsts.len()];
    let mut on_grid = vec![false; firsts.len()];
    let deadline = Instant::now() + LONG;
    while on_grid.iter().zip(&runs).any(|(&ok, r)| !ok || r.len() < 3)
        && runs.iter().all(|r| r.len() < MAX_RUNS)
    {
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, at) = rx
            .recv_timeout(left)
            .expect("periodic timers stopped running");
        let (offset, _) = past_grid_point(firsts[i].1, at);
        on_grid[i] |= offset < ON_GRID;
        runs[i].push(at);
    }
    for id in ids {
        timer.unschedule(id);
    }
    timer.stop_and_join();

    for (i, &(name, first)) in firsts.iter().enumerate() {
        let offsets: Vec<_> = runs[i].iter().map(|&r| past_grid_point(first, r)).collect();
        assert!(
            on_grid[i],
            "first = {name}: no run within {ON_GRID:?} after a point of its grid \
             (period {PERIOD:?}); runs at these offsets past the grid: {:?}",
            offsets.iter().map(|o| o.0).collect::<Vec<_>>()
        );
        // One run per grid point at most: a late timer skips, never bursts.
        assert!(
            offsets.windows(2).all(|w| w[0].1 < w[1].1),
            "first = {name}: two runs in one period: {offsets:?}"
        );
    }
}

/// A period longer than the timer's encoding (584 years), with a `first`
/// almost a period ago: the first run comes at its grid point, not before,
/// and later ones never (they lie beyond the encoding).
#[test]
fn a_period_beyond_the_encoding_runs_once_on_its_grid() {
    let timer = timer();
    let (tx, rx) = mpsc::channel();
    // 146 billion years: beyond `u64` nanoseconds, within `Instant`'s range.
    let period = Duration::from_secs(1 << 62);
    // The grid point after now is `first + period`: `first` a little less
    // than `period` ago, so that point is 50 ms from now.
    let first = Instant::now()
        .checked_sub(period - Duration::from_millis(50))
        .expect("Instant reaches 2^62 s back");
    let expected = first + period;
    let id = timer
        .schedule_periodic(first, period, move || {
            let _ = tx.send(Instant::now());
        })
        .expect("schedule a periodic timer");
    let at = rx.recv_timeout(LONG).expect("the first run");
    assert!(
        at >= expected,
        "ran {:?} before its grid point",
        expected - at
    );
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    timer.unschedule(id);
    timer.stop_and_join();
}
