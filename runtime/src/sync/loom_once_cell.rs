//! Loom models of `OnceCell`, driving the real cell with loom threads: a
//! caller that runs the initializer races one that waits for it, and a
//! failing initializer hands over to the waiter.

use super::OnceCell;
use crate::loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Two callers of `get_or_init`: the initializer runs once, and both see
/// its value (the one that waited is woken).
#[test]
fn loom_once_cell_init_runs_once_and_wakes_the_waiter() {
    loom_model(|| {
        let cell = Arc::new(OnceCell::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let caller = |cell: Arc<OnceCell<usize>>, runs: Arc<AtomicUsize>| {
            move || {
                *cell.get_or_init(|| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    7
                })
            }
        };
        let other = thread::spawn(caller(cell.clone(), runs.clone()));
        assert_eq!(caller(cell.clone(), runs.clone())(), 7);
        assert_eq!(other.join().unwrap(), 7);
        assert_eq!(runs.load(Ordering::Relaxed), 1);
    });
}

/// A failing initializer puts the cell back and wakes the waiter, which
/// runs its own.
#[test]
fn loom_once_cell_a_failed_init_hands_over_to_a_waiter() {
    loom_model(|| {
        let cell = Arc::new(OnceCell::new());
        let failing = {
            let cell = cell.clone();
            thread::spawn(move || cell.get_or_try_init(|| Err(())).copied())
        };
        assert_eq!(*cell.get_or_init(|| 2), 2);
        assert!(matches!(failing.join().unwrap(), Ok(2) | Err(())));
    });
}
