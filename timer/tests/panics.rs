//! A panicking callback is caught, reported with `tracing` at error level,
//! counted, and the timer thread lives on.
//!
//! This binary installs a process-wide `tracing` subscriber (the timer thread
//! is not the test's thread) that records error events.
#![cfg(not(loom))]

mod common;

use common::*;
use spindle_timer::{TimerId, Unschedule};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::Level;

/// Error-level events seen so far, as their rendered fields.
fn errors() -> &'static Mutex<Vec<String>> {
    spindle_testkit::recorded(Level::ERROR)
}

fn reported(needle: &str) -> bool {
    errors().lock().unwrap().iter().any(|e| e.contains(needle))
}

#[test]
fn a_panicking_callback_is_caught_reported_and_counted() {
    errors();
    let timer = timer();
    timer
        .schedule(Instant::now(), || panic!("boom-one-shot"))
        .unwrap();
    // The thread carries on: a later timer still fires.
    sentinel(&timer, Instant::now() + ms(1));
    let stats = timer.stats();
    assert_eq!(stats.panics, 1);
    assert_eq!(stats.triggered, 2);
    assert_eq!(stats.pending, 0);
    assert!(
        reported("boom-one-shot"),
        "not reported: {:?}",
        errors().lock().unwrap()
    );
}

#[test]
fn a_panicking_periodic_timer_is_not_rearmed() {
    errors();
    let timer = timer();
    let runs = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let (r, d) = (runs.clone(), DropCount(drops.clone()));
    let id = timer
        .schedule_periodic(Instant::now(), Duration::from_micros(200), move || {
            let _d = &d;
            if r.fetch_add(1, SeqCst) + 1 == 2 {
                panic!("boom-periodic {}", 2);
            }
        })
        .unwrap();
    wait_for("the panic", || timer.stats().panics == 1);
    sentinel(&timer, Instant::now() + ms(5));
    assert_eq!(runs.load(SeqCst), 2);
    assert_eq!(
        drops.load(SeqCst),
        1,
        "the closure is dropped when the timer ends"
    );
    assert_eq!(timer.unschedule(id), Unschedule::NotFound);
    assert_eq!(timer.stats().pending, 0);
    assert!(reported("boom-periodic 2"));
}

/// A callback whose destructor panics, dropped on the timer thread (a
/// periodic timer that cancels itself), does not take the thread down.
#[test]
fn a_panicking_destructor_on_the_timer_thread_is_caught() {
    errors();
    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("boom-drop");
        }
    }
    let timer = Arc::new(timer());
    let own = Arc::new(OnceLock::<TimerId>::new());
    let (t, me, bomb) = (timer.clone(), own.clone(), PanicOnDrop);
    let (tx, rx) = mpsc::channel();
    let id = timer
        .schedule_periodic(Instant::now(), Duration::from_micros(100), move || {
            let _b = &bomb;
            if let Some(&id) = me.get() {
                tx.send(t.unschedule(id)).unwrap();
            }
        })
        .unwrap();
    own.set(id).unwrap();
    assert_eq!(rx.recv_timeout(LONG).unwrap(), Unschedule::Running);
    wait_for("the destructor's panic", || reported("boom-drop"));
    sentinel(&timer, Instant::now() + ms(1));
    assert_eq!(timer.stats().panics, 1);
    assert_eq!(timer.stats().pending, 0);
}
