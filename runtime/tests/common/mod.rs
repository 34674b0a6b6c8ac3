//! Helpers shared by the runtime's integration tests.

// Each test binary compiles this module and uses only some of it.
#![allow(dead_code)]

pub use spindle_testkit::wait_for;

/// Whether this run is under valgrind: `benches/memcheck.sh` sets
/// `SPINDLE_UNDER_VALGRIND=1`. Everything runs tens of times slower there
/// (and one thread at a time), so long loops are cut down.
pub fn under_valgrind() -> bool {
    std::env::var_os("SPINDLE_UNDER_VALGRIND").is_some_and(|v| v == "1")
}

/// A loop's count: `n`, or `under_valgrind` in a run under valgrind.
pub fn scaled<T>(n: T, under_valgrind: T) -> T {
    if self::under_valgrind() {
        under_valgrind
    } else {
        n
    }
}

/// Waits until the global timer has nothing pending. A timer whose callback
/// was running when it was cancelled (a runtime's watchdog, at its
/// shutdown) is counted out only when the callback returns.
pub fn wait_for_no_pending_timer() {
    wait_for("the global timer to have nothing pending", || {
        spindle_timer::TimerThread::global().stats().pending == 0
    });
}

/// A runtime of `workers` workers with the defaults otherwise.
pub fn rt(workers: usize) -> spindle::Runtime {
    spindle::Runtime::builder()
        .workers(workers)
        .build()
        .unwrap()
}

/// The process's memory mappings now.
pub fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .count()
}

/// `vm.max_map_count`.
pub fn max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .expect("read /proc/sys/vm/max_map_count")
        .trim()
        .parse()
        .expect("a number")
}

/// Runs `test` of this test binary again, in a child process with the
/// environment variable `var` set: the child sees `var` and does the part
/// that must not happen in the test process (abort it, limit it as a
/// whole). Returns how the child ended. A child that aborts leaves no core
/// file behind.
pub fn run_in_child(test: &str, var: &str) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut child =
        std::process::Command::new(std::env::current_exe().expect("the test binary's path"));
    child.args([test, "--exact", "--nocapture"]).env(var, "1");
    // SAFETY: the hook runs in the forked child before exec and calls only
    // setrlimit, which is async-signal-safe and allocates nothing.
    unsafe {
        child.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::setrlimit(libc::RLIMIT_CORE, &none) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    child.output().expect("run the test binary again")
}

/// A one-shot gate that tasks and plain threads wait at until it opens.
pub struct Gate(spindle::Butex);

impl Gate {
    pub fn new() -> Self {
        Gate(spindle::Butex::new(0))
    }

    /// Waits until the gate is open.
    pub fn pass(&self) {
        use std::sync::atomic::Ordering::Acquire;
        while self.0.value().load(Acquire) == 0 {
            let _ = self.0.wait(0, None);
        }
    }

    /// Opens the gate for good: every waiter passes, and so will later ones.
    pub fn open(&self) {
        self.0
            .value()
            .store(1, std::sync::atomic::Ordering::Release);
        self.0.wake_all();
    }
}

/// Spawns `wait` on `rt` twice, and ends its wait once with an interrupt
/// and once with a stop (20 ms after the spawn, when it is waiting):
/// returns what each run returned, `(interrupted, stopped)`.
pub fn end_by_interrupt_and_stop<R: Send + 'static>(
    rt: &spindle::Runtime,
    wait: impl Fn() -> R + Clone + Send + 'static,
) -> (R, R) {
    let run = |stop: bool| {
        let h = rt.spawn(wait.clone());
        std::thread::sleep(std::time::Duration::from_millis(20));
        if stop {
            h.stop().unwrap();
        } else {
            h.interrupt().unwrap();
        }
        h.join().unwrap()
    };
    (run(false), run(true))
}
