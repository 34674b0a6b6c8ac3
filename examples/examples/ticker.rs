//! Lesson: timers straight from `spindle_timer`, the timer thread behind
//! every sleep and deadline. `schedule_periodic` runs a callback every
//! period; `reschedule` moves a pending timer (for a periodic one, its next
//! run: the cadence goes on from there); `unschedule` cancels. Callbacks
//! run on the timer thread, one at a time: keep them short. Here each only
//! sends on a channel, and a task does the work.
//!
//! `cargo run --release --example ticker -- 10 6` (period in ms, ticks; default 10 and 6)

use spindle::sync::mpsc;
use spindle_timer::{TimerOptions, TimerThread};
use std::time::{Duration, Instant};

fn main() {
    spindle_examples::init_tracing();
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let period = Duration::from_millis(args.next().unwrap_or(10).max(1));
    let ticks = args.next().unwrap_or(6).max(2);
    // A timer thread of our own, so that its counts are this lesson's
    // alone (the runtime's is `TimerThread::global()`).
    let mut options = TimerOptions::default();
    options.name = "ticker".into();
    let timer = TimerThread::start(options).expect("start a timer thread");
    let rt = spindle::Runtime::new().expect("start the runtime");
    rt.block_on(|| {
        let start = Instant::now();
        let (tick_tx, tick) = mpsc::channel::<Instant>();
        let ticker = timer
            .schedule_periodic(start + period, period, move || {
                let _ = tick_tx.send(Instant::now());
            })
            .unwrap();
        // A watchdog: a one-shot timer pushed back at every tick, so it
        // fires only once the ticks stop (an idle timeout, say).
        let (idle_tx, idle) = mpsc::channel::<()>();
        let patience = 6 * period;
        let watchdog = timer
            .schedule(start + patience, move || {
                let _ = idle_tx.send(());
            })
            .unwrap();
        for n in 1..=ticks {
            let at = tick.recv().unwrap();
            println!("tick {n} at {:>5.1?}", at - start);
            timer
                .reschedule(watchdog, Instant::now() + patience)
                .unwrap();
            if n == ticks / 2 {
                timer
                    .reschedule(ticker, Instant::now() + 4 * period)
                    .unwrap();
                println!("  (skipping ahead: the next tick in {:?})", 4 * period);
            }
        }
        timer.unschedule(ticker);
        println!("ticks cancelled; the watchdog fires {patience:?} after the last");
        idle.recv().unwrap();
        println!("watchdog at {:>5.1?}", start.elapsed());
    });
    let s = timer.stats();
    println!(
        "the timer thread: {} timers scheduled, {} runs, {} cancelled, {} pending, {} wake-ups",
        s.scheduled, s.triggered, s.unscheduled, s.pending, s.wakeups
    );
    timer.stop_and_join();
}
