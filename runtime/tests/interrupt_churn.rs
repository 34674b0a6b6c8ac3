//! Interrupt churn, in a binary of its own: it checks the global timer's
//! pending count, which other tests would share.

mod common;

use common::rt;
use spindle::SleepError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// 1 000 000 sleeps interrupted at random moments leave no timer and no
/// task behind.
#[test]
fn a_million_interrupted_sleeps_leave_nothing_behind() {
    let rt = rt(2);
    const TASKS: usize = 1000;
    const SLEEPS: usize = 1000;
    let done = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..TASKS)
        .map(|_| {
            let done = done.clone();
            rt.spawn(move || {
                let mut interrupted = 0;
                for _ in 0..SLEEPS {
                    if spindle::sleep(Duration::from_secs(60)) == Err(SleepError::Interrupted) {
                        interrupted += 1;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
                interrupted
            })
        })
        .collect();
    let ids: Vec<_> = hs.iter().map(|h| h.id()).collect();
    // Interrupt everybody until everybody is done.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    while done.load(Ordering::Relaxed) < TASKS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let _ = spindle::interrupt(ids[(rng % TASKS as u64) as usize]);
    }
    let total: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, TASKS * SLEEPS, "every sleep ended by an interrupt");
    let tasks = rt.stats();
    assert_eq!(tasks.spawned, tasks.finished, "no task left behind");
    // The runtime's own stall watchdog is a periodic timer: stop it first.
    rt.shutdown();
    common::wait_for_no_pending_timer();
    let stats = spindle_timer::TimerThread::global().stats();
    // The slot table grows with the peak of live timers (at most one per
    // task here, and the slots threads cache), not with the million armed.
    assert!(stats.slots < 16 * 1024, "timer slots leaked: {stats:?}");
}
