//! Errors that compose: every error is `Send + Sync + 'static`, so one
//! function can `?` a sleep, a lock and a join into a boxed error, and the
//! helpers and conversions say what ended a wait.

mod common;

use common::rt;
use spindle::{JoinError, SleepError, WaitError};
use std::error::Error;
use std::io;
use std::time::{Duration, Instant};

fn assert_error<E: Error + Send + Sync + 'static>() {}

/// Guards the bounds of every error type of the crate's API.
#[test]
fn every_error_is_send_sync_static() {
    assert_error::<JoinError>();
    assert_error::<SleepError>();
    assert_error::<WaitError>();
    assert_error::<spindle::NoSuchTask>();
    assert_error::<spindle::SetWorkersError>();
    assert_error::<spindle::sync::CountOverflow>();
    assert_error::<spindle_timer::TimerError>();
}

type BoxError = Box<dyn Error + Send + Sync>;

/// One function that `?`s a sleep, a lock and a join.
fn sleep_lock_join(m: &spindle::sync::Mutex<u32>) -> Result<u32, BoxError> {
    spindle::sleep(Duration::from_millis(1))?;
    let v = *m.lock()?;
    let doubled = spindle::spawn(move || v * 2).join()?;
    Ok(doubled)
}

/// Guards `?` into a boxed error: a value comes through, and a join's
/// panic comes out as an error that names it.
#[test]
fn one_function_questions_a_sleep_a_lock_and_a_join() {
    let rt = rt(2);
    let m = spindle::sync::Mutex::new(21);
    assert_eq!(rt.block_on(|| sleep_lock_join(&m)).unwrap(), 42);
    let e: BoxError = rt
        .block_on(|| -> Result<(), BoxError> {
            spindle::spawn(|| panic!("a planned panic")).join()?;
            Ok(())
        })
        .unwrap_err();
    assert!(e.to_string().contains("a planned panic"), "{e}");
    let join = e.downcast::<JoinError>().unwrap();
    assert!(join.is_panic());
    assert_eq!(
        join.into_panic().unwrap().downcast_ref::<&str>(),
        Some(&"a planned panic")
    );
}

/// Guards the helpers and the conversions, on errors from real waits.
#[test]
fn helpers_and_conversions_say_what_ended_a_wait() {
    let rt = rt(1);
    let (sleep, join) = rt.block_on(|| {
        spindle::with_deadline(Instant::now() + Duration::from_millis(5), || {
            let sleep = spindle::sleep(Duration::from_secs(30)).unwrap_err();
            let h = spindle::spawn(|| spindle::sleep(Duration::from_millis(50)));
            (sleep, h.join().unwrap_err())
        })
    });
    assert!(sleep.is_deadline_exceeded() && !sleep.is_interrupted());
    assert!(join.is_deadline_exceeded() && !join.is_cancelled());
    let wait: WaitError = sleep.into();
    assert!(wait.is_deadline_exceeded());
    let io_err: io::Error = sleep.into();
    assert_eq!(io_err.kind(), io::ErrorKind::TimedOut);
    assert_eq!(
        io_err.get_ref().and_then(|e| e.downcast_ref::<WaitError>()),
        Some(&WaitError::DeadlineExceeded)
    );
    let io_err: io::Error = join.into();
    assert_eq!(io_err.kind(), io::ErrorKind::TimedOut);
    let interrupted: io::Error = WaitError::Interrupted.into();
    assert_eq!(interrupted.kind(), io::ErrorKind::Interrupted);
    // A stop is never `Interrupted`, which std's retry loops swallow.
    let stopped: io::Error = SleepError::Stopped.into();
    assert_eq!(stopped.kind(), io::ErrorKind::Other);
}
