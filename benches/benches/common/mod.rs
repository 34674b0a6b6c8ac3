//! What the criterion benches share: the peer runtimes they compare against.

/// spindle and tokio with 2 workers each (may, configured through globals,
/// is set to 2 workers here too), built once and shared by a bench's groups.
pub struct Peers {
    pub spindle: spindle::Runtime,
    pub tokio: tokio::runtime::Runtime,
}

impl Peers {
    /// `tokio_timers` enables tokio's time driver (the sleep benches need
    /// it; the runtime benches leave it off, as tokio's default).
    pub fn new(tokio_timers: bool) -> Self {
        // may is configured through globals, before its scheduler starts.
        may::config().set_workers(2);
        Peers {
            spindle: spindle::Runtime::builder()
                .workers(2)
                .build()
                .expect("spindle runtime"),
            tokio: {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                if tokio_timers {
                    b.enable_time();
                }
                b.build().expect("tokio runtime")
            },
        }
    }
}
