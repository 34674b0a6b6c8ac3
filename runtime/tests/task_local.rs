//! `task_local!`: one value per task, made on first use, dropped when the
//! task ends (before its join returns), never inherited by a child; on a
//! plain thread, the thread's own.

mod common;

use common::rt;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

spindle::task_local! {
    static COUNTER: Cell<u32> = Cell::new(0);
    static NAME: RefCell<String> = RefCell::new(String::from("unset"));
}

/// Counts its drops.
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

spindle::task_local! {
    static TRACKED: RefCell<Option<Tracked>> = RefCell::new(None);
}

/// Guards per-task values: many tasks on one worker, each switching out
/// between writes, each see only their own value (a `thread_local!` here
/// would be shared by all of them).
#[test]
fn each_task_has_its_own_value() {
    let rt = rt(1);
    let handles: Vec<_> = (0..64u32)
        .map(|i| {
            rt.spawn(move || {
                for _ in 0..10 {
                    COUNTER.with(|c| c.set(c.get() + i));
                    spindle::yield_now();
                    spindle::sleep(Duration::from_micros(50)).unwrap();
                }
                COUNTER.with(|c| c.get())
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), 10 * i as u32);
    }
}

/// Guards that a child inherits nothing: neither its parent's values nor
/// its name.
#[test]
fn a_child_starts_afresh() {
    let rt = rt(2);
    let (parent_sees, child_sees, child_name) = rt.block_on(|| {
        COUNTER.with(|c| c.set(41));
        NAME.with(|n| *n.borrow_mut() = "parent".into());
        let child = spindle::task::Builder::new()
            .spawn(|| {
                let seen = (COUNTER.with(|c| c.get()), NAME.with(|n| n.borrow().clone()));
                COUNTER.with(|c| c.set(5));
                (seen, spindle::task::current_name())
            })
            .unwrap();
        let (seen, name) = child.join().unwrap();
        (COUNTER.with(|c| c.get()), seen, name)
    });
    assert_eq!(
        parent_sees, 41,
        "the child's write did not reach the parent"
    );
    assert_eq!(child_sees, (0, "unset".to_string()));
    assert_eq!(child_name, None);
}

/// Guards the drop: a task's value drops when the task ends, before its
/// join returns; a task that never used the key makes no value.
#[test]
fn values_drop_when_the_task_ends() {
    let rt = rt(2);
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let h = rt.spawn(move || {
        TRACKED.with(|t| *t.borrow_mut() = Some(Tracked(d)));
        spindle::sleep(Duration::from_millis(5)).unwrap();
    });
    h.join().unwrap();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "dropped once, before join returned"
    );
    // Many tasks, each with a value, some panicking: every value drops.
    let handles: Vec<_> = (0..200)
        .map(|i| {
            let d = drops.clone();
            rt.spawn(move || {
                TRACKED.with(|t| *t.borrow_mut() = Some(Tracked(d)));
                spindle::yield_now();
                assert!(i % 7 != 0, "planned panic");
            })
        })
        .collect();
    let panics = handles
        .into_iter()
        .filter(|_| true)
        .map(|h| h.join())
        .filter(Result::is_err)
        .count();
    assert_eq!(panics, 200usize.div_ceil(7));
    assert_eq!(drops.load(Ordering::SeqCst), 201);
}

/// Guards a value whose `Drop` uses another key: the value it makes is
/// dropped too, and nothing panics.
#[test]
fn a_drop_that_uses_a_key_is_handled() {
    struct UsesCounter(Arc<AtomicUsize>);
    impl Drop for UsesCounter {
        fn drop(&mut self) {
            COUNTER.with(|c| c.set(c.get() + 1));
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    spindle::task_local! {
        static USES: RefCell<Option<UsesCounter>> = RefCell::new(None);
    }
    let rt = rt(1);
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    rt.spawn(move || USES.with(|u| *u.borrow_mut() = Some(UsesCounter(d))))
        .join()
        .unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// Guards plain threads: outside any task a key is the thread's own, and
/// its value drops when the thread exits.
#[test]
fn a_plain_thread_has_its_own_values() {
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    std::thread::spawn(move || {
        COUNTER.with(|c| c.set(3));
        TRACKED.with(|t| *t.borrow_mut() = Some(Tracked(d)));
        let other = std::thread::spawn(|| COUNTER.with(|c| c.get()))
            .join()
            .unwrap();
        assert_eq!(other, 0);
        assert_eq!(COUNTER.with(|c| c.get()), 3);
    })
    .join()
    .unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

spindle::task_local! {
    static BASE: u32 = 40;
    static DERIVED: u32 = BASE.with(|b| *b + 2);
}

/// Guards an initializer that uses another key (and the other key's value
/// staying where the first reference saw it).
#[test]
fn an_initializer_may_use_another_key() {
    let rt = rt(1);
    let v = rt.block_on(|| {
        COUNTER.with(|c| {
            c.set(1);
            let d = DERIVED.with(|d| *d);
            (d, c.get(), BASE.with(|b| *b))
        })
    });
    assert_eq!(v, (42, 1, 40));
    assert_eq!(
        std::thread::spawn(|| DERIVED.with(|d| *d)).join().unwrap(),
        42
    );
}

/// Guards a plain thread's exit: a value whose `Drop` uses a key while the
/// thread's values are being dropped gets a fresh value, and nothing
/// aborts.
#[test]
fn a_thread_value_dropping_may_use_a_key() {
    struct UsesKey;
    impl Drop for UsesKey {
        fn drop(&mut self) {
            assert_eq!(BASE.with(|b| *b), 40);
        }
    }
    spindle::task_local! {
        static HOLDS: RefCell<Option<UsesKey>> = RefCell::new(None);
    }
    std::thread::spawn(|| HOLDS.with(|h| *h.borrow_mut() = Some(UsesKey)))
        .join()
        .unwrap();
}
