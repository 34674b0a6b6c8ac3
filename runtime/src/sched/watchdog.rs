//! The stall watchdog: tells the operator when a task hogs its worker.
//!
//! A started task never leaves its worker (docs/safety.md), so a task that
//! runs for long without suspending starves every other task pinned there.
//! Nothing on the switch path measures time: a worker only publishes which
//! task it is running (`GroupRemote::running`, two stores per switch, the
//! first a release) next to its switch counter. A periodic timer on the
//! shared timer thread samples both every quarter of the threshold (or of
//! the stack release period, if that is shorter: see below), and at least
//! 1 ms apart. A worker seen running the same task, with no switch, for the
//! whole threshold by the clock (from the first sample that saw it, so never
//! early, even when a late sample and an on-time one come close together)
//! is reported once per episode (a `warn!` naming the task, and
//! [`RuntimeStats::stalls`](crate::RuntimeStats::stalls)).
//!
//! The same periodic timer does the stack pool's housekeeping: it marks the
//! idle stacks that have become surplus (`stack/mod.rs`), and wakes a worker to
//! unmap them if all are parked.

use super::control::TaskControl;
use crate::loom::sync::atomic::Ordering::{Acquire, Relaxed};
use crate::meta::TaskId;
use std::sync::Weak;
use std::time::{Duration, Instant};

/// The default threshold (`runtime::Builder::stall_threshold`).
pub(crate) const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_secs(1);
/// Samples per threshold, at least.
#[cfg_attr(loom, allow(dead_code))]
const SAMPLES: u32 = 4;

/// What the watchdog remembers of one worker between samples (only the
/// timer thread touches it).
#[derive(Debug, Clone, Copy)]
struct Seen {
    task: u64,
    switches: u64,
    /// When a sample first saw this run (after it was under way).
    since: Instant,
    reported: bool,
}

impl Seen {
    fn new(now: Instant) -> Seen {
        Seen {
            task: 0,
            switches: 0,
            since: now,
            reported: false,
        }
    }

    /// Takes one sample of a worker: the switch count `before` and `after`
    /// reading the task it runs (`task`, 0 for none), at `now`, read after
    /// them. Returns whether this sample reports a stall.
    fn observe(
        &mut self,
        before: u64,
        task: u64,
        after: u64,
        now: Instant,
        threshold: Duration,
    ) -> bool {
        // With no switch around the read of `task`, the run numbered
        // `after` was that task's, under way before `now`.
        if task != 0 && before == after && task == self.task && after == self.switches {
            let stalled = now.saturating_duration_since(self.since) >= threshold;
            let report = stalled && !self.reported;
            self.reported |= report;
            report
        } else {
            // A torn pair (a switch between the reads) tells nothing: the
            // task may be the one whose run just ended.
            *self = Seen {
                task: if before == after { task } else { 0 },
                switches: after,
                since: now,
                reported: false,
            };
            false
        }
    }
}

/// Starts the watchdog of a runtime; it ends with the runtime. Returns the
/// timer to cancel at shutdown, or `None` if there is no timer thread.
#[cfg(not(loom))]
pub(crate) fn start(
    control: Weak<TaskControl>,
    threshold: Duration,
) -> Option<spindle_timer::TimerId> {
    // At least SAMPLES per threshold, and several per stack release period.
    let period = (threshold / SAMPLES)
        .min(crate::stack::RELEASE_PERIOD / SAMPLES)
        .max(Duration::from_millis(1));
    // Room for every worker the runtime may grow to: the samples allocate
    // nothing after this.
    let mut seen: Vec<Seen> = Vec::with_capacity(super::control::MAX_WORKERS);
    let timer = spindle_timer::TimerThread::global();
    let first = std::time::Instant::now() + period;
    timer
        .schedule_periodic(first, period, move || {
            if let Some(control) = control.upgrade() {
                sample(&control, &mut seen, threshold);
                // The same timer keeps the stack pool: surplus stacks are
                // unmapped by idle workers, so wake one if all are parked.
                if control.stacks.tick(std::time::Instant::now()) {
                    control.idle.notify_work(0);
                }
            }
        })
        .map_err(|error| tracing::warn!(%error, "no stall watchdog: the timer thread refused"))
        .ok()
}

/// Under loom there is no timer thread (and no runtime is built).
#[cfg(loom)]
pub(crate) fn start(_: Weak<TaskControl>, _: Duration) -> Option<spindle_timer::TimerId> {
    None
}

/// One look at every worker.
#[cfg_attr(loom, allow(dead_code))]
fn sample(control: &TaskControl, seen: &mut Vec<Seen>, threshold: Duration) {
    let workers = control.worker_count();
    if seen.len() < workers {
        // A new worker's first sample starts its record afresh anyway.
        seen.resize(workers, Seen::new(Instant::now()));
    }
    for (i, s) in seen.iter_mut().enumerate() {
        let Some(g) = control.group(i) else { continue };
        // Only `running` pairs with the worker (its Release store, after the
        // last run's bump): the count read after it is at least that bump.
        let before = g.stats.switches.load(Relaxed);
        let task = g.running.load(Acquire);
        let after = g.stats.switches.load(Relaxed);
        if s.observe(before, task, after, Instant::now(), threshold) {
            control.stalls.fetch_add(1, Relaxed);
            warn_of_stall(i, TaskId::from_u64(task));
        }
    }
}

/// Says which task stalls worker `worker`, by id and by the name it was
/// spawned with, and what most likely holds it.
#[cfg_attr(loom, allow(dead_code))]
fn warn_of_stall(worker: usize, id: TaskId) {
    let table = crate::meta::table();
    // Held while its name is read: the task may end meanwhile, but its slot
    // (and name) stay until the ref is dropped.
    let held = table.acquire(id);
    // SAFETY: the ref taken above keeps the name, written at spawn, from
    // being cleared or rewritten until it is released below.
    let name = held.and_then(|t| unsafe { t.meta().name() }).unwrap_or("");
    tracing::warn!(
        worker,
        task = %id,
        name,
        "a task has run without suspending for over the stall threshold, so the \
         other tasks of its worker wait: most likely it is in a blocking call (a \
         std lock or channel, std::thread::sleep, blocking I/O); use spindle's, or \
         task::spawn_blocking"
    );
    if let Some(t) = held {
        table.release(t, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THRESHOLD: Duration = Duration::from_millis(1000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A late sample first sees a run, and on-time ones follow closely:
    /// the report waits for the threshold by the clock, not for a count of
    /// samples (which reported after 780 ms here).
    #[test]
    fn a_stall_is_never_reported_early() {
        let t0 = Instant::now();
        let mut s = Seen::new(t0);
        assert!(!s.observe(5, 7, 5, t0 + ms(480), THRESHOLD)); // late sample
        for at in [500, 750, 1000, 1250, 1479] {
            assert!(!s.observe(5, 7, 5, t0 + ms(at), THRESHOLD), "at {at} ms");
        }
        assert!(s.observe(5, 7, 5, t0 + ms(1480), THRESHOLD));
        assert!(
            !s.observe(5, 7, 5, t0 + ms(1730), THRESHOLD),
            "once per episode"
        );
    }

    /// A switch, or one that lands between the reads of a sample (a torn
    /// pair), starts a new episode.
    #[test]
    fn a_switch_starts_a_new_episode() {
        let t0 = Instant::now();
        let mut s = Seen::new(t0);
        assert!(!s.observe(5, 7, 5, t0, THRESHOLD));
        // Torn: the 7 read may be the run that ended; the next run of 7
        // (with the count 6) is timed from the next sample, not from this.
        assert!(!s.observe(5, 7, 6, t0 + ms(900), THRESHOLD));
        assert!(!s.observe(6, 7, 6, t0 + ms(1200), THRESHOLD));
        assert!(!s.observe(6, 7, 6, t0 + ms(2199), THRESHOLD));
        assert!(s.observe(6, 7, 6, t0 + ms(2200), THRESHOLD));
        assert!(!s.observe(7, 7, 7, t0 + ms(2300), THRESHOLD)); // switched
        assert!(!s.observe(7, 7, 7, t0 + ms(3299), THRESHOLD));
        assert!(s.observe(7, 7, 7, t0 + ms(3300), THRESHOLD));
        assert!(
            !s.observe(7, 0, 7, t0 + ms(3400), THRESHOLD),
            "idle is no stall"
        );
    }
}
