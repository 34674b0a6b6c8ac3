//! A loom model of the `wakers` handshake of [`TaskControl::push_remote`],
//! driving the real [`GroupRemote::push_woken`] and the wait of
//! `TaskControl`'s drop: a waker may still be touching the runtime after
//! the task it queued has been taken and its worker has exited, and the
//! runtime's drop must come after that touch. The cell stands for what the
//! waker's `notify` reads (the idle state), and its write for the free.

use super::*;
use crate::sched::queue::LocalQueue;
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

/// A worker's remote part and the memory its runtime's drop frees.
struct Model {
    group: GroupRemote,
    idle: UnsafeCell<u32>,
}

// SAFETY (test only): the group is Sync as in a runtime; the cell is
// checked by loom.
unsafe impl Sync for Model {}
// SAFETY (test only): as above.
unsafe impl Send for Model {}

#[test]
fn loom_the_drop_waits_for_a_waker_on_its_way_out() {
    loom::model(|| {
        let fresh = crossbeam_deque::Worker::<TaskRef>::new_fifo();
        let m = Arc::new(Model {
            group: GroupRemote::new(fresh.stealer()),
            idle: UnsafeCell::new(0),
        });
        let task = crate::meta::leak_for_model();
        let waker = {
            let m = m.clone();
            thread::spawn(move || {
                m.group.push_woken(task, || {
                    // SAFETY (of the model): loom checks this read against
                    // the free's write below.
                    m.idle.with(|v| unsafe { v.read() });
                })
            })
        };
        let worker = {
            let m = m.clone();
            thread::spawn(move || {
                // Takes the task, runs it to its end, exits.
                let ready = LocalQueue::new();
                while m.group.woken.take_all(&ready) == 0 {
                    thread::yield_now();
                }
                let t = ready.pop_front().expect("the task taken");
                t.dequeued();
            })
        };
        worker.join().expect("the worker does not panic");
        // `Drop for TaskControl`, once the last worker is joined.
        m.group.wait_for_wakers();
        // SAFETY (of the model): the write that freeing stands for.
        m.idle.with_mut(|v| unsafe { v.write(0) });
        waker.join().expect("the waker does not panic");
    });
}
