//! A leak check in a test binary of its own: the task table is
//! process-wide, so other tests running beside it would grow it.

mod common;

use common::rt;
use spindle::Runtime;

/// A task that starts a child with `spawn_urgent` (switching to it at once)
/// and is unwound there by the runtime's stop, before it runs again, still
/// lets the child's slot go. (A child's handle made only after the switch
/// would never exist here, and the slot would wait for it for good.)
#[test]
fn a_parent_unwound_inside_spawn_urgent_leaks_no_slot() {
    use spindle::JoinError;
    use std::sync::{Arc, Mutex};

    let round = || {
        let rt = rt(1);
        let holder: Arc<Mutex<Option<Runtime>>> = Arc::default();
        let h = {
            let holder = holder.clone();
            rt.spawn(move || {
                while holder.lock().unwrap().is_none() {
                    spindle::yield_now(); // until the runtime is in there
                }
                let _child = spindle::spawn_urgent(move || {
                    // The child stops its own runtime (its worker stops
                    // before the parent runs again).
                    drop(holder.lock().unwrap().take());
                });
                unreachable!("the runtime stopped before the parent ran again");
            })
        };
        *holder.lock().unwrap() = Some(rt);
        assert!(matches!(h.join(), Err(JoinError::Cancelled)));
    };
    for _ in 0..100 {
        round();
    }
    let before = Runtime::builder()
        .workers(1)
        .build()
        .unwrap()
        .stats()
        .task_slots;
    const ROUNDS: usize = 2_000;
    for _ in 0..ROUNDS {
        round();
    }
    let after = Runtime::builder()
        .workers(1)
        .build()
        .unwrap()
        .stats()
        .task_slots;
    assert!(
        after < before + ROUNDS / 2,
        "the task table grew from {before} to {after} slots in {ROUNDS} rounds"
    );
}
