//! Helpers shared by the tests of spindle's crates; not published.

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
