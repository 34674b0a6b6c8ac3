//! What the runtime tells an operator, through `tracing`, about a worker
//! thread it cannot free. This binary installs a process-wide subscriber
//! (the events come from worker threads) that records warnings.

mod common;

use std::sync::Arc;
use std::time::Duration;
use tracing::Level;

/// Limit for waits that only a bug can exhaust.
const LONG: Duration = Duration::from_secs(60);

/// Waits until a warning satisfies `seen` (for at most [`LONG`]); returns
/// whether one did. Installs the recording subscriber on first use.
fn warned(seen: impl FnMut(&str) -> bool) -> bool {
    spindle_testkit::await_recorded(Level::WARN, LONG, seen)
}

/// Every warning so far, for a failure's message.
fn warnings() -> Vec<String> {
    spindle_testkit::recorded(Level::WARN)
        .lock()
        .unwrap()
        .clone()
}

/// Waits at the gate when dropped.
struct WaitsWhenDropped(Arc<common::Gate>);

impl Drop for WaitsWhenDropped {
    fn drop(&mut self) {
        self.0.pass();
    }
}

/// A task that waits while it unwinds cannot switch out: it blocks its
/// worker thread. Past a second of it, a warning names the task; the wait
/// still ends normally when the gate opens.
#[test]
fn a_wait_that_blocks_a_worker_while_its_task_unwinds_is_reported() {
    warnings(); // installs the recorder before the runtime's first event
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    let gate = Arc::new(common::Gate::new());
    let in_drop = WaitsWhenDropped(gate.clone());
    let h = rt.spawn(move || {
        let _in_drop = in_drop;
        panic!("this task unwinds, and waits at the gate as it does");
    });
    let says_task = format!("task={}", h.id());
    let reported = warned(|w| w.contains(&says_task) && w.contains("waits while it unwinds"));
    // Before any assert: a failed one would drop the runtime, whose stop
    // waits for the blocked worker.
    gate.open();
    assert!(reported, "no warning: {:?}", warnings());
    assert!(h.join().is_err(), "the task panicked");
    // The worker is free again.
    assert_eq!(rt.spawn(|| 7).join().expect("a plain task"), 7);
}

/// The stop of a runtime waits for a task of it in `block_on` on another
/// runtime before it unwinds that task (`f` borrows from its frame). Past a
/// second of it, a warning says what the stop waits for.
#[test]
fn a_stop_held_up_by_block_on_is_reported() {
    warnings(); // installs the recorder before the runtime's first event
    let outer = spindle::Runtime::builder().workers(1).build().unwrap();
    let inner = Arc::new(spindle::Runtime::builder().workers(1).build().unwrap());
    let gate = Arc::new(common::Gate::new());
    let entered = Arc::new(common::Gate::new());
    let (in_task, passes, says_entered) = (inner.clone(), gate.clone(), entered.clone());
    let _borrowing = outer.spawn(move || {
        in_task.block_on(|| {
            says_entered.open();
            passes.pass();
        })
    });
    entered.pass();
    let stopper = std::thread::spawn(move || outer.shutdown());
    let reported = warned(|w| w.contains("the stop has waited") && w.contains("block_on"));
    // Before any assert, so that a failure does not hang the stop.
    gate.open();
    stopper.join().expect("the stop ends once block_on returns");
    assert!(reported, "no warning: {:?}", warnings());
}

/// A task that runs past the stall threshold without suspending (here in
/// `std::thread::sleep`, a call that blocks its worker) is named in the
/// watchdog's warning by its id and by the name it was spawned with, and
/// the warning says what most likely holds it.
#[test]
fn a_stalling_task_is_named_with_the_likely_cause() {
    warnings(); // installs the recorder before the runtime's first event
    let rt = spindle::Runtime::builder()
        .workers(1)
        .stall_threshold(Duration::from_millis(40))
        .build()
        .unwrap();
    let h = rt.block_on(|| {
        spindle::task::Builder::new()
            .name("sleeps-on-its-worker")
            .spawn(|| std::thread::sleep(Duration::from_millis(400)))
            .unwrap()
    });
    let says_task = format!("task={}", h.id());
    let reported = warned(|w| {
        w.contains(&says_task) && w.contains("sleeps-on-its-worker") && w.contains("blocking call")
    });
    h.join().unwrap();
    assert!(reported, "no warning: {:?}", warnings());
}
