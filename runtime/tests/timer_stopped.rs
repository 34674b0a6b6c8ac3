//! With the shared timer thread stopped (its owner may stop even the global
//! one), a timed wait cannot be armed: it ends at once as timed out, rather
//! than sleep for good, and an error says why, once.
//!
//! In a binary of its own: it stops the process's timer thread, and
//! installs a process-wide `tracing` subscriber.

use std::time::{Duration, Instant};
use tracing::Level;

#[test]
fn a_wait_the_timer_refuses_ends_at_once_and_says_so() {
    let errors = || {
        spindle_testkit::recorded(Level::ERROR)
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.contains("refused a wait's deadline"))
            .count()
    };
    errors(); // installs the recorder
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    spindle_timer::TimerThread::global().stop_and_join();
    let long = Duration::from_secs(3600);
    let waits = rt
        .spawn(move || {
            let slept = spindle::sleep(long);
            let b = spindle::Butex::new(0);
            let waited = b.wait(0, Some(Instant::now() + long));
            (slept, waited)
        })
        .join()
        .expect("the task does not panic");
    assert_eq!(waits, (Ok(()), Err(spindle::WaitError::TimedOut)));
    assert_eq!(errors(), 1, "one error, for both waits");
}
