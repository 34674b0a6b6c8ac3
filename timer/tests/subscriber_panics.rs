//! A `tracing` subscriber that panics inside the timer thread's own events.
//!
//! In a binary of its own: it installs a process-wide subscriber.
#![cfg(not(loom))]

mod common;

use common::*;
use spindle_timer::TimerError;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Events whose fields contain this make the subscriber panic.
static PANIC_ON: Mutex<Option<&'static str>> = Mutex::new(None);

struct Panicky;

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl Subscriber for Panicky {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let needle = *PANIC_ON.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(needle) = needle {
            if fields.0.contains(needle) {
                panic!("the subscriber panics on {needle:?}");
            }
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Counts the callbacks dropped without having run.
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// The two cases run in turn, in one test: they share the subscriber.
#[test]
fn a_panicking_subscriber_loses_no_timer_silently() {
    tracing::subscriber::set_global_default(Panicky).expect("install the subscriber");

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

    // 2. It panics in the thread's own loop (here, on its start): the thread
    //    stops for good. Every timer it accepted before is dropped without
    //    running, and from then on `schedule` fails: no timer is accepted
    //    that would never fire.
    *PANIC_ON.lock().unwrap() = Some("timer thread started");
    let timer = common::timer();
    let (ran, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut accepted = 0;
    let limit = Instant::now() + LONG;
    loop {
        let (r, d) = (ran.clone(), Dropped(dropped.clone()));
        let armed = timer.schedule(Instant::now() + ms(1), move || {
            let _d = d;
            r.fetch_add(1, SeqCst);
        });
        match armed {
            Ok(_) => accepted += 1,
            Err(TimerError::Stopped) => break,
            Err(e) => panic!("{e:?}"),
        }
        assert!(Instant::now() < limit, "schedule never failed");
        std::thread::yield_now();
    }
    // The refused timer's closure is dropped too.
    wait_for("the accepted timers to be dropped", || {
        dropped.load(SeqCst) == accepted + 1
    });
    assert_eq!(ran.load(SeqCst), 0, "the thread ran timers after its panic");
    assert_eq!(timer.stats().pending, 0);
    timer.stop_and_join(); // and stopping it again is fine
}
