//! The process-wide timer thread takes options before its first use, and
//! refuses them after. In a binary of its own: it starts the global timer.
#![cfg(not(loom))]

use spindle_timer::{TimerError, TimerOptions, TimerThread};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn the_global_timer_takes_options_only_before_its_first_use() {
    // Bad options are refused, and nothing starts.
    let e = TimerThread::configure_global({
        let mut o = TimerOptions::default();
        o.coalesce = Duration::MAX;
        o
    })
    .unwrap_err();
    assert!(matches!(e, TimerError::InvalidOptions(_)), "{e}");
    let timer = TimerThread::configure_global({
        let mut o = TimerOptions::default();
        o.coalesce = Duration::ZERO;
        o.name = "configured-timer".to_owned();
        o
    })
    .expect("the first configuration starts it");
    assert!(std::ptr::eq(timer, TimerThread::global()));
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(Instant::now(), move || {
            tx.send(std::thread::current().name().map(str::to_owned))
                .unwrap()
        })
        .unwrap();
    let name = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(name.as_deref(), Some("configured-timer"));
    // Started: a second configuration changes nothing.
    let e = TimerThread::configure_global(TimerOptions::default()).unwrap_err();
    assert!(e.to_string().contains("started already"), "{e}");
}
