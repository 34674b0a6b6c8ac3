//! `spindle::io::wait_fd` on a caller's own non-blocking fds (pipes): ready
//! at once when it is, waiting only the task when it is not, ended by its
//! own deadline, a deadline scope, `interrupt` and `stop`; a closed writer
//! makes the read end ready; a bad fd is an error, never a panic or a hang;
//! a reused fd number waits afresh. Time bounds are wide.

mod common;

use common::{rt, wait_for};
use spindle::io::{wait_fd, Interest};
use spindle::{Runtime, WaitError};
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What "at once" means on a busy 2-core CI machine.
const PROMPTLY: Duration = Duration::from_secs(5);

/// A deadline that never passes in a passing test: it turns a wait that
/// nothing ended into a failure instead of a hang.
fn backstop() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(30))
}

/// A non-blocking pipe: (read end, write end).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds: [libc::c_int; 2] = [0; 2];
    // SAFETY: pipe2 writes two fds into `fds`, an array of two c_ints.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", io::Error::last_os_error());
    // SAFETY: both fds were just opened by pipe2, and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Writes one byte into a pipe's write end.
fn put(w: BorrowedFd<'_>) {
    // SAFETY: writes one byte from a live one-byte buffer to a valid fd.
    let n = unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) };
    assert_eq!(n, 1, "write: {}", io::Error::last_os_error());
}

/// Reads what a pipe's read end holds (at most 64 bytes); how many there were.
fn drain(r: BorrowedFd<'_>) -> usize {
    let mut buf = [0u8; 64];
    // SAFETY: reads at most 64 bytes into a live 64-byte buffer from a valid fd.
    let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).unwrap_or(0)
}

/// Runs `f` in a task of a new 1-worker runtime, then on this plain thread.
fn in_a_task_and_on_a_thread(f: impl Fn() + Send + Copy) {
    rt(1).block_on(f);
    f();
}

/// Guards readiness that is already there: a pipe's write end is writable at once (also for ReadWrite), a read end with data is readable at once.
#[test]
fn ready_fds_return_at_once() {
    in_a_task_and_on_a_thread(|| {
        let (r, w) = pipe();
        let t = Instant::now();
        wait_fd(w.as_fd(), Interest::Writable, None).unwrap();
        put(w.as_fd());
        wait_fd(r.as_fd(), Interest::Readable, None).unwrap();
        // A socket with data in and room out is ready either way.
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        io::Write::write_all(&mut &b, b"y").unwrap();
        wait_fd(a.as_fd(), Interest::ReadWrite, backstop()).unwrap();
        assert!(t.elapsed() < PROMPTLY, "took {:?}", t.elapsed());
        assert_eq!(drain(r.as_fd()), 1);
    });
}

/// Guards a wait that blocks: Readable waits for a write from another task, holding only its task on a 1-worker runtime.
#[test]
fn readable_waits_for_a_write_from_another_task() {
    let rt = rt(1);
    rt.block_on(|| {
        for _ in 0..10 {
            let (r, w) = pipe();
            let written = Arc::new(AtomicBool::new(false));
            let seen = written.clone();
            let waiter = spindle::spawn(move || {
                let res = wait_fd(r.as_fd(), Interest::Readable, backstop());
                (res, seen.load(Ordering::SeqCst), drain(r.as_fd()))
            });
            // This task runs while the waiter waits: the worker is free.
            spindle::sleep(Duration::from_millis(5)).unwrap();
            assert!(!waiter.is_finished(), "wait_fd returned on an empty pipe");
            written.store(true, Ordering::SeqCst);
            put(w.as_fd());
            let (res, after_write, got) = waiter.join().unwrap();
            res.unwrap();
            assert!(after_write, "wait_fd returned before the write");
            assert_eq!(got, 1);
        }
    });
}

/// Guards wait_fd's own deadline: it ends the wait with TimedOut after the deadline, in a task and on a plain thread.
#[test]
fn the_deadline_argument_ends_the_wait() {
    in_a_task_and_on_a_thread(|| {
        let (r, _w) = pipe();
        let limit = Duration::from_millis(50);
        let t = Instant::now();
        let e = wait_fd(r.as_fd(), Interest::Readable, Some(t + limit)).unwrap_err();
        let took = t.elapsed();
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e:?}");
        assert!(
            took >= limit,
            "ended after {took:?}, before its {limit:?} deadline"
        );
        assert!(took < PROMPTLY, "ended after {took:?}");
        // A deadline already past fails at once.
        let t = Instant::now();
        let e = wait_fd(r.as_fd(), Interest::Readable, Some(Instant::now())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e:?}");
        assert!(t.elapsed() < PROMPTLY);
    });
}

/// The WaitError inside an I/O error.
fn inner(e: &io::Error) -> Option<WaitError> {
    e.get_ref()
        .and_then(|i| i.downcast_ref::<WaitError>())
        .copied()
}

/// Runs a wait on an empty pipe in a task of `rt`, signals the task with
/// `signal` once it is in the wait, and returns the wait's result (then
/// a second wait's, to show whether the signal stuck) and how long the
/// first took.
fn signalled_wait(
    rt: &Runtime,
    signal: fn(spindle::TaskId) -> Result<(), spindle::NoSuchTask>,
) -> (io::Result<()>, io::Result<()>, Duration) {
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let task = rt.spawn(move || {
        let (r, _w) = pipe();
        s.store(true, Ordering::SeqCst);
        let t = Instant::now();
        let first = wait_fd(r.as_fd(), Interest::Readable, backstop());
        let took = t.elapsed();
        let second = wait_fd(r.as_fd(), Interest::Readable, Some(Instant::now()));
        (first, second, took)
    });
    wait_for("the waiter to start", || started.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(30));
    signal(task.id()).expect("the waiter ended before it was signalled");
    task.join().unwrap()
}

/// Guards the task's signals on wait_fd: a deadline scope (TimedOut, DeadlineExceeded inside), interrupt (Interrupted, once), stop (Stopped, for good).
#[test]
fn a_scope_an_interrupt_and_a_stop_end_the_wait() {
    let rt = rt(2);
    rt.block_on(|| {
        let (r, _w) = pipe();
        let limit = Duration::from_millis(50);
        let t = Instant::now();
        let res = spindle::with_deadline(t + limit, || {
            wait_fd(r.as_fd(), Interest::Readable, backstop())
        });
        let took = t.elapsed();
        let e = res.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e:?}");
        assert_eq!(inner(&e), Some(WaitError::DeadlineExceeded), "{e:?}");
        assert!(took >= limit, "ended after {took:?}, before {limit:?}");
        assert!(took < PROMPTLY, "ended after {took:?}");
    });

    let (first, second, took) = signalled_wait(&rt, spindle::interrupt);
    let e = first.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e:?}");
    assert_eq!(inner(&e), Some(WaitError::Interrupted), "{e:?}");
    assert!(took < PROMPTLY, "ended after {took:?}");
    // Delivered once: the next wait ends by its own (past) deadline.
    let e = second.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e:?}");

    let (first, second, took) = signalled_wait(&rt, spindle::stop);
    let e = first.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Other, "{e:?}");
    assert_eq!(inner(&e), Some(WaitError::Stopped), "{e:?}");
    assert!(took < PROMPTLY, "ended after {took:?}");
    // For good: the next wait fails with Stopped too.
    let e = second.unwrap_err();
    assert_eq!(inner(&e), Some(WaitError::Stopped), "{e:?}");
}

/// Guards EOF readiness: the read end of a pipe whose writer has closed is ready at once, and a waiter is woken by the close.
#[test]
fn a_closed_writer_makes_the_read_end_ready() {
    in_a_task_and_on_a_thread(|| {
        let (r, w) = pipe();
        drop(w);
        let t = Instant::now();
        wait_fd(r.as_fd(), Interest::Readable, backstop()).unwrap();
        assert!(t.elapsed() < PROMPTLY, "took {:?}", t.elapsed());
    });
    let rt = rt(1);
    rt.block_on(|| {
        let (r, w) = pipe();
        let waiter = spindle::spawn(move || wait_fd(r.as_fd(), Interest::Readable, backstop()));
        spindle::sleep(Duration::from_millis(10)).unwrap();
        drop(w);
        let t = Instant::now();
        waiter.join().unwrap().unwrap();
        assert!(t.elapsed() < PROMPTLY, "took {:?}", t.elapsed());
    });
}

/// An fd number that is not open in this process.
const NOT_OPEN: libc::c_int = 1_000_000;

/// Guards bad fds: wait_fd on an fd number that is not open is an io::Error at once, not a panic or a hang, in a task and on a plain thread.
#[test]
fn a_bad_fd_is_an_error_not_a_panic_or_a_hang() {
    // SAFETY: F_GETFD only looks the number up.
    let open = unsafe { libc::fcntl(NOT_OPEN, libc::F_GETFD) } != -1;
    assert!(!open, "fd {NOT_OPEN} is open: pick another number");
    in_a_task_and_on_a_thread(|| {
        // SAFETY: I/O safety is broken on purpose: the number names no open
        // file, which is what this test hands wait_fd. No memory is at
        // stake, and the BorrowedFd is never closed or used past this call.
        let bad = unsafe { BorrowedFd::borrow_raw(NOT_OPEN) };
        for interest in [Interest::Readable, Interest::Writable, Interest::ReadWrite] {
            let t = Instant::now();
            let r = wait_fd(bad, interest, backstop());
            let took = t.elapsed();
            let e = r.expect_err("wait_fd on an fd that is not open");
            assert_ne!(e.kind(), ErrorKind::TimedOut, "it waited: {e:?}");
            assert!(took < PROMPTLY, "took {took:?}");
        }
    });
}

/// Guards fd-number reuse: a number closed after a wait and opened again for a new pipe waits afresh, neither missing its wake nor waking early.
#[test]
fn a_reused_fd_number_waits_afresh() {
    let rt = rt(1);
    rt.block_on(|| {
        for round in 0..50 {
            // Last round's pipe is closed: this one likely gets its numbers.
            let (r, w) = pipe();
            let written = Arc::new(AtomicBool::new(false));
            let seen = written.clone();
            let waiter = spindle::spawn(move || {
                let res = wait_fd(r.as_fd(), Interest::Readable, backstop());
                (res, seen.load(Ordering::SeqCst), r)
            });
            if round % 5 != 0 {
                spindle::sleep(Duration::from_millis(1)).unwrap();
            }
            written.store(true, Ordering::SeqCst);
            put(w.as_fd());
            let (res, after_write, r) = waiter.join().unwrap();
            res.unwrap_or_else(|e| panic!("round {round}: {e:?}"));
            assert!(after_write, "round {round}: woken before the write");
            assert_eq!(drain(r.as_fd()), 1);
        }
    });
}

/// Guards many waits at once: 100 tasks wait on 100 pipes and each is woken by its own write, in reverse order.
#[test]
fn many_tasks_wait_on_many_pipes() {
    const PIPES: usize = 100;
    let rt = rt(2);
    rt.block_on(|| {
        let pipes: Vec<(Arc<OwnedFd>, OwnedFd)> = (0..PIPES)
            .map(|_| {
                let (r, w) = pipe();
                (Arc::new(r), w)
            })
            .collect();
        let waiters: Vec<_> = pipes
            .iter()
            .map(|(r, _)| {
                let r = r.clone();
                spindle::spawn(move || {
                    wait_fd(r.as_fd(), Interest::Readable, backstop())?;
                    Ok::<_, io::Error>(drain(r.as_fd()))
                })
            })
            .collect();
        spindle::sleep(Duration::from_millis(10)).unwrap();
        for (i, (_, w)) in pipes.iter().enumerate().rev() {
            put(w.as_fd());
            if i % 10 == 0 {
                spindle::yield_now();
            }
        }
        for (i, waiter) in waiters.into_iter().enumerate() {
            let got = waiter.join().unwrap();
            assert_eq!(got.unwrap_or_else(|e| panic!("pipe {i}: {e:?}")), 1);
        }
    });
}
