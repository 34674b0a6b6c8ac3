//! A `tracing` subscriber that panics inside the timer thread's own events.
//!
//! In a binary of its own: it installs a process-wide subscriber.
#![cfg(not(loom))]

mod common;

use common::*;
use spindle_testkit::OnEvent;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Events whose fields contain this make the subscriber panic.
static PANIC_ON: Mutex<Option<&'static str>> = Mutex::new(None);

/// Panics on the events [`PANIC_ON`] names.
fn panicky(_: tracing::Level, fields: &str) {
    let needle = *PANIC_ON.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(needle) = needle {
        if fields.contains(needle) {
            panic!("the subscriber panics on {needle:?}");
        }
    }
}

/// The two cases run in turn, in one test: they share the subscriber.
#[test]
fn a_panicking_subscriber_does_not_stop_the_timer() {
    tracing::subscriber::set_global_default(OnEvent(panicky)).expect("install the subscriber");

    // 1. It panics on the report of a panicking callback: the report is
    //    lost, the timer thread is not, and the slot is released.
    *PANIC_ON.lock().unwrap() = Some("timer callback panicked");
    let timer = common::timer();
    timer
        .schedule(Instant::now(), || panic!("a callback panics"))
        .unwrap();
    sentinel(&timer, Instant::now() + ms(1));
    let stats = timer.stats();
    assert_eq!((stats.panics, stats.pending), (1, 0), "{stats:?}");
    timer.stop_and_join();

    // 2. It panics on the thread's start: that event is lost too, and the
    //    thread serves on.
    *PANIC_ON.lock().unwrap() = Some("timer thread started");
    let timer = common::timer();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    timer
        .schedule(Instant::now() + ms(1), move || {
            r.fetch_add(1, SeqCst);
        })
        .unwrap();
    sentinel(&timer, Instant::now() + ms(2));
    assert_eq!(ran.load(SeqCst), 1);
    timer.stop_and_join();
}
