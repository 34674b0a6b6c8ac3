//! A task that overflows its stack is named, and the process aborts with a
//! clear message instead of dying of a bare SIGSEGV. The overflow runs in a
//! child process (this same test binary, re-run with an environment
//! variable), since it must kill the process.

use std::process::Command;

const CHILD: &str = "SPINDLE_OVERFLOW_CHILD";

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
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let h = rt.spawn(|| recurse(0));
        let _ = h.join();
        unreachable!("the overflow must abort the process");
    }
    assert_child_reports_an_overflow_and_aborts(
        "an_overflowing_task_is_named_and_the_process_aborts",
    );
}

/// Runs `test` of this binary in a child process (which does the
/// overflowing) and checks that the child named the task's overflow of its
/// 256 KiB stack and aborted.
fn assert_child_reports_an_overflow_and_aborts(test: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("spindle: task#") && stderr.contains("overflowed its 262144-byte stack"),
        "stderr was: {stderr}"
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc_sigabrt()), "aborted");
}

fn libc_sigabrt() -> i32 {
    6
}

/// Recurses until the stack runs out when dropped.
struct OverflowsOnDrop;

impl Drop for OverflowsOnDrop {
    fn drop(&mut self) {
        std::hint::black_box(recurse(0));
    }
}

/// A started task cancelled at shutdown unwinds on its own stack; an
/// overflow during that unwind is reported by name too. (Found by review:
/// the worker did not say which task it was unwinding, so this died of a
/// bare SIGSEGV.)
#[test]
fn an_overflow_while_a_cancelled_task_unwinds_is_named() {
    if std::env::var_os(CHILD).is_some() {
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = started.clone();
        drop(rt.spawn(move || {
            let _unwinds_badly = OverflowsOnDrop;
            s.store(true, std::sync::atomic::Ordering::SeqCst);
            // Always queued between its turns: the stop cancels it.
            loop {
                spindle::yield_now();
            }
        }));
        while !started.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        rt.shutdown();
        unreachable!("the overflow must abort the process");
    }
    assert_child_reports_an_overflow_and_aborts(
        "an_overflow_while_a_cancelled_task_unwinds_is_named",
    );
}
