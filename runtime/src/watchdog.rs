//! The stall watchdog: tells the operator when a task hogs its worker.
//!
//! A started task never leaves its worker (docs/safety.md), so a task that
//! runs for long without suspending starves every other task pinned there.
//! Nothing on the switch path measures time: a worker only publishes which
//! task it is running (`GroupShared::running`, two plain stores per switch)
//! next to its switch counter. A periodic timer on the shared timer thread
//! samples both every quarter of the threshold (or of the stack release
//! period, if that is shorter: see below); a worker that has been
//! running the same task with no switch for the whole threshold is reported
//! once per episode (a `warn!` naming the task, and
//! [`RuntimeStats::stalls`](crate::RuntimeStats::stalls)).
//!
//! The same periodic timer does the stack pool's housekeeping: it marks the
//! idle stacks that have become surplus (`stack.rs`), and wakes a worker to
//! unmap them if all are parked.

use crate::control::Shared;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Weak;
use std::time::Duration;

/// The default threshold (`runtime::Builder::stall_threshold`).
pub(crate) const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_secs(1);
/// Samples per threshold, at least.
#[cfg_attr(loom, allow(dead_code))]
const SAMPLES: u32 = 4;

/// What the watchdog remembers of one worker between samples (only the
/// timer thread touches it).
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    task: u64,
    switches: u64,
    /// Consecutive samples with the same task and no switch.
    still: u32,
    reported: bool,
}

/// Starts the watchdog of a runtime; it ends with the runtime. Returns the
/// timer to cancel at shutdown, or `None` if there is no timer thread.
#[cfg(not(loom))]
pub(crate) fn start(shared: Weak<Shared>, threshold: Duration) -> Option<spindle_timer::TimerId> {
    // At least SAMPLES per threshold, and several per stack release period.
    let period = (threshold / SAMPLES)
        .min(crate::stack::RELEASE_PERIOD / SAMPLES)
        .max(Duration::from_millis(1));
    // Consecutive still samples that make a stall: the threshold, rounded
    // up, and at least two (one late sample and an on-time one can be less
    // than a period apart).
    let needed = threshold.as_nanos().div_ceil(period.as_nanos()).max(2);
    let needed = u32::try_from(needed).unwrap_or(u32::MAX);
    // Room for every worker the runtime may grow to: the samples allocate
    // nothing after this.
    let mut seen: Vec<Seen> = Vec::with_capacity(crate::control::MAX_WORKERS);
    let timer = spindle_timer::TimerThread::global();
    let first = std::time::Instant::now() + period;
    timer
        .schedule_periodic(first, period, move || {
            if let Some(shared) = shared.upgrade() {
                sample(&shared, &mut seen, needed);
                // The same timer keeps the stack pool: surplus stacks are
                // unmapped by idle workers, so wake one if all are parked.
                if shared.stacks.tick(std::time::Instant::now()) {
                    shared.idle.notify_work(0);
                }
            }
        })
        .map_err(|error| tracing::warn!(%error, "no stall watchdog: the timer thread refused"))
        .ok()
}

/// Under loom there is no timer thread (and no runtime is built).
#[cfg(loom)]
pub(crate) fn start(_: Weak<Shared>, _: Duration) -> Option<spindle_timer::TimerId> {
    None
}

/// One look at every worker.
#[cfg_attr(loom, allow(dead_code))]
fn sample(shared: &Shared, seen: &mut Vec<Seen>, needed: u32) {
    let workers = shared.worker_count();
    seen.resize(workers, Seen::default());
    for (i, s) in seen.iter_mut().enumerate() {
        let Some(g) = shared.group(i) else { continue };
        let task = g.running.load(Relaxed);
        let switches = g.stats.switches.load(Relaxed);
        if task != 0 && task == s.task && switches == s.switches {
            s.still = s.still.saturating_add(1);
            if s.still >= needed && !s.reported {
                s.reported = true;
                shared.stalls.fetch_add(1, Relaxed);
                tracing::warn!(
                    worker = i,
                    task = %crate::TaskId::from_u64(task),
                    "a task has run without suspending for over the stall threshold: \
                     the other tasks of its worker wait"
                );
            }
        } else {
            *s = Seen {
                task,
                switches,
                still: 0,
                reported: false,
            };
        }
    }
}
