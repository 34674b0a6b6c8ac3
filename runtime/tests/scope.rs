//! `spindle::scope`: tasks that borrow from the caller, all ended before
//! the scope returns, whatever ends them.

mod common;

use common::rt;
use spindle::JoinError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Guards borrowing: tasks write through `&mut` borrows of the caller's
/// data and read a shared one; a joined handle gives its value.
#[test]
fn scoped_tasks_borrow_from_the_caller() {
    let rt = rt(2);
    let shared = vec![1u64, 2, 3];
    let mut outs = vec![0u64; 32];
    let total = rt.block_on(|| {
        spindle::scope(|s| {
            for (i, o) in outs.iter_mut().enumerate() {
                let shared = &shared;
                s.spawn(move || {
                    spindle::sleep(Duration::from_micros(100)).unwrap();
                    *o = i as u64 * shared.iter().sum::<u64>();
                });
            }
            let h = s.spawn(|| shared.len());
            h.join().unwrap()
        })
    });
    assert_eq!(total, 3);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(*o, i as u64 * 6);
    }
}

/// Guards the same from a plain thread (the global runtime's tasks).
#[test]
fn a_plain_thread_scopes_too() {
    let count = AtomicUsize::new(0);
    spindle::scope(|s| {
        for _ in 0..100 {
            s.spawn(|| {
                spindle::yield_now();
                count.fetch_add(1, Ordering::Relaxed);
            });
        }
    });
    assert_eq!(count.load(Ordering::Relaxed), 100);
}

/// Guards the end: neither a deadline scope nor an interrupt of the
/// waiting task makes `scope` return before its tasks end.
#[test]
fn nothing_cuts_the_end_of_a_scope_short() {
    let rt = rt(2);
    let done = AtomicUsize::new(0);
    let started = Instant::now();
    rt.block_on(|| {
        let me = spindle::current().unwrap();
        spindle::with_deadline(Instant::now() + Duration::from_millis(5), || {
            spindle::scope(|s| {
                s.spawn(|| {
                    let _ = spindle::interrupt(me);
                    // The child inherits the 5 ms deadline scope, so its own
                    // waits would end with it: it holds its worker instead
                    // (the other worker is free).
                    std::thread::sleep(Duration::from_millis(60));
                    done.fetch_add(1, Ordering::SeqCst);
                });
            });
        });
        assert_eq!(
            done.load(Ordering::SeqCst),
            1,
            "scope returned before its task ended"
        );
    });
    assert!(started.elapsed() >= Duration::from_millis(60));
}

/// Guards panics: an unjoined task's panic makes `scope` panic once all
/// have ended; a joined one is the join's error only.
#[test]
fn unjoined_panics_reach_the_scope() {
    let rt = rt(2);
    let ended = AtomicUsize::new(0);
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(|| {
            spindle::scope(|s| {
                s.spawn(|| panic!("planned"));
                for _ in 0..8 {
                    s.spawn(|| {
                        spindle::sleep(Duration::from_millis(10)).unwrap();
                        ended.fetch_add(1, Ordering::SeqCst);
                    });
                }
            })
        })
    }));
    assert!(r.is_err(), "the scope panicked");
    assert_eq!(ended.load(Ordering::SeqCst), 8, "after every task ended");
    let joined = rt.block_on(|| {
        spindle::scope(|s| {
            let h = s.spawn(|| -> u32 { panic!("planned and joined") });
            match h.join() {
                Err(JoinError::Panicked(p)) => p.message().map(str::to_owned),
                other => panic!("expected a panic, got {:?}", other.map(|_| ())),
            }
        })
    });
    assert_eq!(joined.as_deref(), Some("planned and joined"));
}

/// Guards a scope whose own closure panics: its tasks still end first.
#[test]
fn the_closure_panicking_still_waits() {
    let ended = AtomicUsize::new(0);
    let r = catch_unwind(AssertUnwindSafe(|| {
        spindle::scope(|s| {
            s.spawn(|| {
                spindle::sleep(Duration::from_millis(20)).unwrap();
                ended.fetch_add(1, Ordering::SeqCst);
            });
            panic!("the scope's closure");
        })
    }));
    assert!(r.is_err());
    assert_eq!(ended.load(Ordering::SeqCst), 1);
}

/// Guards a failed spawn: it is an error, and the scope does not wait for
/// the task that never was.
#[test]
fn a_failed_scoped_spawn_is_an_error() {
    let rt = rt(1);
    let r = rt.block_on(|| {
        spindle::scope(|s| {
            spindle::task::Builder::new()
                .stack_size(1)
                .spawn_scoped(s, || ())
                .map(|_| ())
        })
    });
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
}

/// Guards shutdown: a runtime shut down while a task waits at its
/// scope's end cancels the scoped tasks, and the shutdown completes.
#[test]
fn shutdown_ends_a_scope_with_cancelled_tasks() {
    let rt = rt(1);
    let started = std::sync::Arc::new(AtomicUsize::new(0));
    let st = started.clone();
    let h = rt.spawn(move || {
        spindle::scope(|s| {
            s.spawn(|| {
                st.fetch_add(1, Ordering::SeqCst);
                spindle::sleep(Duration::from_secs(30))
            });
        })
    });
    common::wait_for("the scoped task to start", || {
        started.load(Ordering::SeqCst) == 1
    });
    let t0 = Instant::now();
    rt.shutdown();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "the 30 s sleep was cancelled"
    );
    // The scope's own task ended one way or the other; it did not hang.
    let _ = h.join();
}

/// Guards the frame a scope's tasks borrow when the runtime's stop unwinds
/// the scope's *owner* first, in a wait inside the scope's closure (not at
/// the scope's end): the owner must not finish unwinding, which frees the
/// frame, before the scoped tasks have ended. The frame and each scoped
/// task log their drops; the frame's must come last.
#[test]
fn a_stop_unwinding_the_owner_waits_for_the_scoped_tasks() {
    type Log = std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>;
    /// Logs `what` when dropped.
    struct LogOnDrop(Log, &'static str);
    impl Drop for LogOnDrop {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(self.1);
        }
    }
    for workers in [1, 2] {
        let rt = rt(workers);
        let log: Log = Default::default();
        let started = std::sync::Arc::new(AtomicUsize::new(0));
        let (st, l) = (started.clone(), log.clone());
        let _owner = rt.spawn(move || {
            let frame = LogOnDrop(l.clone(), "owner's frame");
            spindle::scope(|s| {
                for _ in 0..2 {
                    let (st, l, frame) = (st.clone(), l.clone(), &frame);
                    s.spawn(move || {
                        let _guard = LogOnDrop(l, "scoped task");
                        st.fetch_add(1, Ordering::SeqCst);
                        let _ = spindle::sleep(Duration::from_secs(60));
                        frame.1.len()
                    });
                }
                // The owner waits inside the closure, where the stop ends
                // its wait.
                let _ = spindle::sleep(Duration::from_secs(60));
            });
        });
        common::wait_for("both scoped tasks to start", || {
            started.load(Ordering::SeqCst) == 2
        });
        let t0 = Instant::now();
        rt.shutdown();
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the 60 s sleeps were cancelled"
        );
        let log = log.lock().unwrap().clone();
        assert_eq!(
            log,
            ["scoped task", "scoped task", "owner's frame"],
            "with {workers} workers"
        );
    }
}
