//! Helpers shared by the tests of spindle's crates; not published.
#![warn(missing_docs)]

/// A `tracing` subscriber that hands each event's level and rendered fields
/// (`name=value ...`, the message as `message=...`) to its closure. Tests
/// install it process-wide, to see events of threads that are not theirs
/// (the timer thread, a runtime's workers).
#[derive(Debug)]
pub struct OnEvent<F>(pub F);

/// An event's fields, rendered.
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl<F: Fn(tracing::Level, &str) + Send + Sync + 'static> tracing::Subscriber for OnEvent<F> {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        (self.0)(*event.metadata().level(), &fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The events at `level` seen so far in this process, as their rendered
/// fields. The first call installs the process-wide subscriber that records
/// them; a test binary records one level only.
///
/// # Panics
/// If another subscriber is installed, or a later call names another level.
pub fn recorded(level: tracing::Level) -> &'static std::sync::Mutex<Vec<String>> {
    use std::sync::{Mutex, OnceLock};
    static RECORDED: OnceLock<(tracing::Level, &'static Mutex<Vec<String>>)> = OnceLock::new();
    let (recording, events) = *RECORDED.get_or_init(|| {
        let events: &'static Mutex<Vec<String>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let recorder = OnEvent(move |l: tracing::Level, fields: &str| {
            if l == level {
                events.lock().unwrap().push(fields.to_owned());
            }
        });
        tracing::subscriber::set_global_default(recorder).expect("install the subscriber");
        (level, events)
    });
    assert_eq!(recording, level, "this binary records one level only");
    events
}

/// Waits until an event recorded at `level` satisfies `seen`, for at most
/// `limit`; returns whether one did.
pub fn await_recorded(
    level: tracing::Level,
    limit: std::time::Duration,
    mut seen: impl FnMut(&str) -> bool,
) -> bool {
    let start = std::time::Instant::now();
    loop {
        if recorded(level).lock().unwrap().iter().any(|e| seen(e)) {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// How long [`wait_for`] waits before it calls the wait a hang.
pub const HANG: std::time::Duration = std::time::Duration::from_secs(60);

/// Polls `cond` until it holds, yielding at first and then napping 1 ms
/// between looks; panics, naming `what`, after [`HANG`]: a bug that loses
/// a wake-up fails its test, not CI's time limit.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    let mut looks = 0u32;
    while !cond() {
        assert!(start.elapsed() < HANG, "timed out waiting for {what}");
        looks += 1;
        if looks < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
