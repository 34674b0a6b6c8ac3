//! `JoinHandle::interrupt` and `stop` (by handle, `NoSuchTask` once the
//! task has ended) and `task::current_name`.

mod common;

use common::{rt, wait_for};
use spindle::{NoSuchTask, SleepError};
use std::time::Duration;

/// How long the tasks here would sleep if nothing ended their sleeps.
const LONG: Duration = Duration::from_secs(30);

/// Guards interrupt by handle: it ends the task's sleep, and once the task
/// has ended the handle says so with `NoSuchTask`.
#[test]
fn a_handle_interrupts_its_task_until_it_ends() {
    let rt = rt(1);
    let h = rt.spawn(|| spindle::sleep(LONG));
    std::thread::sleep(Duration::from_millis(20));
    h.interrupt().unwrap();
    wait_for("the interrupted task to end", || h.is_finished());
    assert_eq!(h.interrupt(), Err(NoSuchTask));
    assert_eq!(h.stop(), Err(NoSuchTask));
    assert_eq!(h.join().unwrap(), Err(SleepError::Interrupted));
}

/// Guards stop by handle: sticky, so the task's later sleeps fail at once.
#[test]
fn a_handle_stops_its_task() {
    let rt = rt(1);
    let h = rt.spawn(|| {
        let first = spindle::sleep(LONG);
        let second = spindle::sleep(LONG);
        (first, second, spindle::is_stopped())
    });
    std::thread::sleep(Duration::from_millis(20));
    h.stop().unwrap();
    assert_eq!(
        h.join().unwrap(),
        (Err(SleepError::Stopped), Err(SleepError::Stopped), true)
    );
}

/// Guards task names: a named task reads its name, an unnamed one and a
/// plain thread read `None`, and a child does not inherit its parent's.
#[test]
fn current_name_is_the_name_given_at_spawn() {
    let rt = rt(1);
    assert_eq!(spindle::task::current_name(), None, "a plain thread");
    let (own, child) = rt.block_on(|| {
        spindle::task::Builder::new()
            .name("fetcher")
            .spawn(|| {
                let child = spindle::spawn(spindle::task::current_name);
                (spindle::task::current_name(), child.join().unwrap())
            })
            .unwrap()
            .join()
            .unwrap()
    });
    assert_eq!(own.as_deref(), Some("fetcher"));
    assert_eq!(child, None, "a child does not inherit the name");
    assert_eq!(rt.block_on(spindle::task::current_name), None);
}
