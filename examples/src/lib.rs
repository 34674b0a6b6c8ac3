//! Shared helpers for the examples.
#![warn(missing_docs)]

/// Prints spindle's warnings (and whatever `RUST_LOG` asks for) on stderr:
/// the stall watchdog's warning, which names a task that holds up its
/// worker and says that a blocking call is the likely cause, is one of them.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
