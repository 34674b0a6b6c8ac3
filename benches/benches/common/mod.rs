//! What the criterion benches share: the peer runtimes they compare against,
//! and the `main` of the benches that run on them with short measurements.

use criterion::Criterion;
use std::time::Duration;

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

    /// The whole run of a bench whose groups all use the peers: criterion
    /// with short measurements (1 s warm-up, 3 s, 10 samples; the command
    /// line may override them), the groups, then the runtimes' shutdown,
    /// which is part of the run: a hang there is a bug.
    // The sleep bench, which also includes this module, runs its own.
    #[allow(dead_code)]
    pub fn run_benches(bench_all: fn(&mut Criterion, &Peers)) {
        let mut c = Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(10)
            .configure_from_args();
        let peers = Peers::new(false);
        bench_all(&mut c, &peers);
        c.final_summary();
        let Peers { spindle, tokio } = peers;
        spindle.shutdown();
        tokio.shutdown_timeout(Duration::from_secs(5));
    }
}
