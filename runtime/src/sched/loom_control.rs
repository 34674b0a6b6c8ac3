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

/// A spawn from outside the runtime (`OutsideSpawns::begin`, then a push)
/// races its stop (the flag, then a worker's `OutsideSpawns::wait` and its
/// last drain): the task is either refused or drained, never left queued
/// after the drain.
#[test]
fn loom_an_outside_spawn_racing_the_stop_is_refused_or_drained() {
    loom::model(|| {
        let shared = Arc::new((
            OutsideSpawns::new(),
            AtomicBool::new(false),
            loom::sync::Mutex::new(Vec::<u32>::new()),
        ));
        let spawner = {
            let shared = shared.clone();
            thread::spawn(move || {
                let (spawns, stopping, queue) = &*shared;
                match spawns.begin(stopping) {
                    Some(under_way) => {
                        queue.lock().unwrap().push(1);
                        drop(under_way);
                        true
                    }
                    None => false,
                }
            })
        };
        let (spawns, stopping, queue) = &*shared;
        stopping.store(true, SeqCst);
        // The worker's end: wait for spawns under way, then drain.
        spawns.wait(stopping);
        let drained = std::mem::take(&mut *queue.lock().unwrap());
        let queued = spawner.join().unwrap();
        assert_eq!(
            drained.len(),
            usize::from(queued),
            "a spawn was left queued"
        );
    });
}
