//! Helpers for this crate's unit tests: watching a thread block in the
//! futex system call, to tell "not woken" from "not yet asleep".

use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Runs `f` on a new thread; returns its handle and kernel thread id.
pub(crate) fn spawn_with_tid<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> (JoinHandle<T>, libc::pid_t) {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        f()
    });
    (h, rx.recv().unwrap())
}

/// Whether thread `tid` of this process is in the futex system call now.
pub(crate) fn in_futex(tid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
        .is_ok_and(|s| s.split(' ').next() == Some(&libc::SYS_futex.to_string()))
}

/// Waits until thread `tid` is in the futex system call.
pub(crate) fn await_in_futex(tid: libc::pid_t) {
    while !in_futex(tid) {
        thread::sleep(Duration::from_millis(1));
    }
}
