//! brpc #3383: bthread's TimerThread keeps a cancelled timer until its
//! deadline, so an RPC server holds about qps × timeout dead timers. Here a
//! cancelled timer's slot is reclaimed by the canceller at once, and stale
//! entries are compacted away, so memory follows the live timers.
#![cfg(not(loom))]

mod common;

use common::*;
use spindle_timer::{TimerId, Unschedule};
use std::time::{Duration, Instant};

#[test]
fn cancelled_far_future_timers_do_not_hold_memory() {
    let timer = timer();
    let rounds = 20u64;
    let per_round = 2000u64;
    let far = Instant::now() + Duration::from_secs(3600);
    let mut max_slots = 0;
    let mut max_queued = 0;
    for round in 0..rounds {
        let ids: Vec<TimerId> = (0..per_round)
            .map(|i| {
                timer
                    .schedule(far + Duration::from_millis(i), || {})
                    .unwrap()
            })
            .collect();
        for id in ids {
            assert_eq!(timer.unschedule(id), Unschedule::Removed);
        }
        let stats = timer.stats();
        assert_eq!(stats.pending, 0, "round {round}");
        max_slots = max_slots.max(stats.slots);
        max_queued = max_queued.max(stats.queued);
    }
    let armed = rounds * per_round;
    // The table grows to the peak of live timers (2000, plus per-thread
    // caches) and no further: well below a quarter of all timers armed.
    assert!(
        max_slots < armed / 4,
        "{max_slots} slots for {armed} armed timers"
    );
    assert!(max_slots < 10_000);
    // Dead entries are compacted away rather than kept until the deadline.
    assert!(
        max_queued < armed / 4,
        "{max_queued} entries kept for {armed} armed timers"
    );
    // Nothing fires on the way; the memory is there to be reused.
    sentinel(&timer, Instant::now() + ms(1));
    assert_eq!(timer.stats().triggered, 1);
}
