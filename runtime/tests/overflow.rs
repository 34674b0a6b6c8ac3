//! A task that overflows its stack is named, and the process aborts with a
//! clear message instead of dying of a bare SIGSEGV. The overflow runs in a
//! child process (this same test binary, re-run with an environment
//! variable), since it must kill the process.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const CHILD: &str = "SPINDLE_OVERFLOW_CHILD";
/// How a child names the task that will overflow, on stderr.
const CHILD_SAYS: &str = "child: the overflowing task is ";

#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let buf = std::hint::black_box([depth as u8; 512]);
    if depth == u64::MAX {
        return 0;
    }
    recurse(depth + 1) + u64::from(buf[7])
}

#[test]
fn an_overflowing_task_is_named_and_the_process_aborts() {
    if std::env::var_os(CHILD).is_some() {
        overflow_a_task(spindle::task::Builder::new());
    }
    assert_child_reports_an_overflow_and_aborts(
        "an_overflowing_task_is_named_and_the_process_aborts",
        "",
    );
}

/// A task given a name by `task::Builder::name` is reported by that name
/// too, beside its id.
#[test]
fn an_overflowing_task_is_reported_by_its_name() {
    if std::env::var_os(CHILD).is_some() {
        overflow_a_task(spindle::task::Builder::new().name("deep-recursion"));
    }
    assert_child_reports_an_overflow_and_aborts(
        "an_overflowing_task_is_reported_by_its_name",
        " \"deep-recursion\"",
    );
}

/// Stacks are mapped a slab at a time, and each gets its guard page when a
/// task first runs on it: a task on a stack deep in a later slab (past the
/// stacks of 100 tasks that started and wait) is caught as well.
#[test]
fn an_overflow_deep_in_a_slab_of_stacks_is_caught() {
    if std::env::var_os(CHILD).is_some() {
        let gate = Arc::new(common::Gate::new());
        let waiting: Vec<_> = (0..100)
            .map(|_| {
                let g = gate.clone();
                move || g.pass()
            })
            .collect();
        overflow_a_task_after(spindle::task::Builder::new(), waiting);
    }
    assert_child_reports_an_overflow_and_aborts(
        "an_overflow_deep_in_a_slab_of_stacks_is_caught",
        "",
    );
}

/// In the child: spawns a task with `builder` that overflows its stack once
/// the parent has been told which task it is; never returns.
fn overflow_a_task(builder: spindle::task::Builder) -> ! {
    overflow_a_task_after(builder, Vec::<fn()>::new())
}

/// [`overflow_a_task`], after spawning `first` and letting each of them
/// start (they hold their stacks while they wait).
fn overflow_a_task_after(
    builder: spindle::task::Builder,
    first: Vec<impl FnOnce() + Send + 'static>,
) -> ! {
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let _first: Vec<_> = first.into_iter().map(spindle::spawn).collect();
        spindle::yield_now();
        let named = Arc::new(AtomicBool::new(false));
        let go = named.clone();
        let h = builder
            .spawn(move || {
                // Not before the parent knows which task this is.
                while !go.load(Ordering::SeqCst) {
                    spindle::yield_now();
                }
                recurse(0)
            })
            .unwrap();
        say_which_task(h.id());
        named.store(true, Ordering::SeqCst);
        let _ = h.join();
    });
    unreachable!("the overflow must abort the process");
}

/// Tells the parent, on stderr, which task will overflow: in one write, so
/// that the line is whole whatever the process does next.
fn say_which_task(id: spindle::TaskId) {
    let line = format!("{CHILD_SAYS}{id}\n");
    std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes()).unwrap();
}

/// Runs `test` of this binary in a child process (which does the
/// overflowing) and checks that the child named the task's overflow of its
/// 256 KiB stack, by its id and then `name` (as the report quotes it, or
/// empty for a task with no name), and aborted.
fn assert_child_reports_an_overflow_and_aborts(test: &str, name: &str) {
    let out = common::run_in_child(test, CHILD);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    // The report names the task as its TaskId displays, where the child
    // told us which task it was.
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix(CHILD_SAYS))
        .unwrap_or_else(|| panic!("the child named no task; stderr was: {stderr}"));
    let named = format!("spindle: {id}{name} overflowed its 262144-byte stack");
    assert!(
        stderr.contains(&named),
        "expected {named:?}; stderr was: {stderr}"
    );
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "aborted");
}

/// Recurses until the stack runs out when dropped.
struct OverflowsOnDrop;

impl Drop for OverflowsOnDrop {
    fn drop(&mut self) {
        std::hint::black_box(recurse(0));
    }
}

/// A started task cancelled at shutdown unwinds on its own stack; an
/// overflow during that unwind is reported by name too. (A worker that
/// does not say which task it is unwinding leaves this to die of a bare
/// SIGSEGV.)
#[test]
fn an_overflow_while_a_cancelled_task_unwinds_is_named() {
    if std::env::var_os(CHILD).is_some() {
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let s = started.clone();
        let h = rt.spawn(move || {
            let _unwinds_badly = OverflowsOnDrop;
            s.store(true, Ordering::SeqCst);
            // Always queued between its turns: the stop cancels it.
            loop {
                spindle::yield_now();
            }
        });
        say_which_task(h.id());
        drop(h);
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        rt.shutdown();
        unreachable!("the overflow must abort the process");
    }
    assert_child_reports_an_overflow_and_aborts(
        "an_overflow_while_a_cancelled_task_unwinds_is_named",
        "",
    );
}

/// A SIGSEGV sent to the process (not a fault) while the default action was
/// in place before spindle's handler still kills it: the handler, which
/// passes on what is not an overflow, sends it again rather than swallow
/// it. (Restoring the default and returning is not enough: that ends a
/// fault, since the fault repeats, but not a sent signal.)
#[test]
fn a_sent_sigsegv_is_not_swallowed() {
    if std::env::var_os(CHILD).is_some() {
        // SAFETY: resetting SIGSEGV to its default action (std installed
        // a handler of its own); signal(2) is safe with threads about.
        unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        rt.block_on(|| {
            // SAFETY: raise(3) has no preconditions.
            unsafe { libc::raise(libc::SIGSEGV) };
        });
        println!("survived a SIGSEGV");
        return;
    }
    let out = common::run_in_child("a_sent_sigsegv_is_not_swallowed", CHILD);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
