//! Helpers for this crate's unit tests: watching a thread block in the
//! futex system call, to tell "not woken" from "not yet asleep".

use std::sync::atomic::AtomicU32;
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

/// Whether thread `tid` of this process is in the futex system call now,
/// on `word` (so that a futex call of its own, such as a channel's, does not
/// count).
pub(crate) fn in_futex(tid: libc::pid_t, word: &AtomicU32) -> bool {
    let Ok(line) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
        return false;
    };
    let mut fields = line.split(' ');
    let nr = fields.next();
    let addr = fields
        .next()
        .and_then(|a| usize::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    nr == Some(&libc::SYS_futex.to_string()) && addr == Some(word.as_ptr() as usize)
}

/// Waits until thread `tid` is in the futex system call on `word`; panics
/// after a minute (or if /proc cannot tell).
pub(crate) fn await_in_futex(tid: libc::pid_t, word: &AtomicU32) {
    let start = std::time::Instant::now();
    while !in_futex(tid, word) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "thread {tid} never blocked in the futex call"
        );
        thread::sleep(Duration::from_millis(1));
    }
}
