//! `spindle::signal`: a task waiting in `Signals::recv` or `ctrl_c` wakes
//! with the signal that came while the other tasks of its worker run; a
//! plain thread's wait blocks the thread; a deadline scope, `interrupt` and
//! `stop` end a wait and take no signal; every `Signals` of a signal sees
//! each delivery; signals that cannot be waited for are `InvalidInput`; a
//! dropped `Signals` leaves no fd (and so no registration) behind.
//!
//! Signals belong to the process, and the tests of one binary run on
//! parallel threads: each test holds `SERIAL` throughout. A signal is
//! raised only while a `Signals` of it exists: the first one installs a
//! handler for good, so a late delivery is harmless. Time bounds are wide.

mod common;

use common::{rt, wait_for};
use libc::{c_int, SIGINT, SIGUSR1, SIGUSR2};
use spindle::signal::{ctrl_c, Signals};
use spindle::WaitError;
use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What "at once" means on a busy 2-core CI machine.
const PROMPTLY: Duration = Duration::from_secs(5);

/// Held by each test: signals are per process.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sends `sig` to this process (any thread of it may take it).
fn raise(sig: c_int) {
    // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
    let r = unsafe { libc::kill(libc::getpid(), sig) };
    assert_eq!(r, 0, "kill: {}", io::Error::last_os_error());
}

/// A wait that nothing ends in a passing test: a lost wake-up then fails
/// the test with `TimedOut` instead of hanging it.
fn within_backstop<T>(f: impl FnOnce() -> T) -> T {
    spindle::with_deadline(Instant::now() + Duration::from_secs(30), f)
}

/// The WaitError inside an I/O error.
fn inner(e: &io::Error) -> Option<WaitError> {
    e.get_ref()
        .and_then(|i| i.downcast_ref::<WaitError>())
        .copied()
}

/// How many fds this process has open.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("read /proc/self/fd")
        .count()
}

/// In a task: naps until `flag` is set. On a 1-worker runtime, a task that
/// set it and was then seen to have set it has switched out since: it is
/// in the wait it made just after.
fn nap_until(flag: &AtomicBool) {
    let start = Instant::now();
    while !flag.load(SeqCst) {
        assert!(start.elapsed() < PROMPTLY * 6, "the waiter never started");
        spindle::sleep(Duration::from_millis(1)).unwrap();
    }
}

/// A plain thread that raises `sig` after 30 s unless dropped first: a
/// wait that blocked its worker would otherwise hang the test, not fail it.
struct RaiseLater {
    cancel: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RaiseLater {
    fn new(sig: c_int) -> Self {
        let (cancel, cancelled) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            if cancelled.recv_timeout(Duration::from_secs(30)).is_err() {
                raise(sig);
            }
        });
        RaiseLater {
            cancel: Some(cancel),
            thread: Some(thread),
        }
    }
}

impl Drop for RaiseLater {
    fn drop(&mut self) {
        drop(self.cancel.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Guards the wait itself: a task in `recv` holds only itself (another task of its 1-worker runtime runs meanwhile) and wakes with the number of the signal that came, from another task; one that came before `recv` is not lost.
#[test]
fn recv_suspends_only_the_task_and_returns_the_signal_that_came() {
    let _serial = serial();
    let rt = rt(1);
    rt.block_on(|| {
        let signals = Arc::new(Signals::new(&[SIGUSR1, SIGUSR2]).unwrap());
        let started = Arc::new(AtomicBool::new(false));
        let _backstop = RaiseLater::new(SIGUSR1);
        let waiter = {
            let (signals, started) = (signals.clone(), started.clone());
            spindle::spawn(move || {
                started.store(true, SeqCst);
                within_backstop(|| signals.recv())
            })
        };
        nap_until(&started);
        // This task runs while the waiter waits: the worker is free.
        for _ in 0..5 {
            spindle::sleep(Duration::from_millis(2)).unwrap();
            assert!(!waiter.is_finished(), "recv returned with no signal");
        }
        raise(SIGUSR2);
        assert_eq!(waiter.join().unwrap().unwrap(), SIGUSR2);
        assert_eq!(signals.try_recv(), None, "SIGUSR2 was taken twice");
        // A delivery with no waiter is kept for the next recv.
        raise(SIGUSR1);
        wait_for("SIGUSR1 to be kept", || signals.try_recv() == Some(SIGUSR1));
        raise(SIGUSR1);
        let t = Instant::now();
        assert_eq!(within_backstop(|| signals.recv()).unwrap(), SIGUSR1);
        assert!(t.elapsed() < PROMPTLY, "took {:?}", t.elapsed());
    });
}

/// Guards several signals coming together: each is returned once, none hides another.
#[test]
fn signals_that_came_together_are_each_returned_once() {
    let _serial = serial();
    let signals = Signals::new(&[SIGUSR1, SIGUSR2]).unwrap();
    raise(SIGUSR1);
    raise(SIGUSR2);
    let mut got = [
        within_backstop(|| signals.recv()).unwrap(),
        within_backstop(|| signals.recv()).unwrap(),
    ];
    got.sort_unstable();
    let mut want = [SIGUSR1, SIGUSR2];
    want.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(signals.try_recv(), None);
}

/// Guards ctrl_c: a task waiting in it wakes on SIGINT from a plain thread while another task runs, and the SIGINT that comes after it returned does not end the process (the default action is gone, as its docs say).
#[test]
fn ctrl_c_wakes_on_sigint() {
    let _serial = serial();
    let rt = rt(1);
    rt.block_on(|| {
        let started = Arc::new(AtomicBool::new(false));
        let _backstop = RaiseLater::new(SIGINT);
        let waiter = {
            let started = started.clone();
            spindle::spawn(move || {
                started.store(true, SeqCst);
                within_backstop(ctrl_c)
            })
        };
        nap_until(&started);
        for _ in 0..5 {
            spindle::sleep(Duration::from_millis(2)).unwrap();
            assert!(!waiter.is_finished(), "ctrl_c returned with no SIGINT");
        }
        std::thread::spawn(|| raise(SIGINT)).join().unwrap();
        waiter.join().unwrap().unwrap();
    });
    // Nobody waits for SIGINT now: it does nothing.
    raise(SIGINT);
    std::thread::sleep(Duration::from_millis(20));
}

/// Guards a plain thread's wait: recv blocks the thread until the signal comes.
#[test]
fn recv_on_a_plain_thread_blocks_until_the_signal() {
    let _serial = serial();
    let signals = Arc::new(Signals::new(&[SIGUSR1]).unwrap());
    let started = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (signals, started) = (signals.clone(), started.clone());
        std::thread::spawn(move || {
            started.store(true, SeqCst);
            within_backstop(|| signals.recv())
        })
    };
    wait_for("the waiter to start", || started.load(SeqCst));
    std::thread::sleep(Duration::from_millis(30));
    assert!(!waiter.is_finished(), "recv returned with no signal");
    raise(SIGUSR1);
    assert_eq!(waiter.join().unwrap().unwrap(), SIGUSR1);
}

/// Guards the deadline scope: it ends recv and ctrl_c with TimedOut whose inner error is DeadlineExceeded, in a task and on a plain thread, and the wait takes no signal.
#[test]
fn a_deadline_scope_ends_the_wait() {
    let _serial = serial();
    let check = || {
        let signals = Signals::new(&[SIGUSR2]).unwrap();
        let recv = || signals.recv().map(drop);
        let waits: [&dyn Fn() -> io::Result<()>; 2] = [&recv, &ctrl_c];
        for wait in waits {
            let limit = Duration::from_millis(50);
            let t = Instant::now();
            let e = spindle::with_deadline(t + limit, wait).unwrap_err();
            let took = t.elapsed();
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{e:?}");
            assert_eq!(inner(&e), Some(WaitError::DeadlineExceeded), "{e:?}");
            assert!(took >= limit, "ended after {took:?}, before {limit:?}");
            assert!(took < PROMPTLY, "ended after {took:?}");
        }
        // The signal that comes next is there for the next recv.
        raise(SIGUSR2);
        assert_eq!(within_backstop(|| signals.recv()).unwrap(), SIGUSR2);
    };
    rt(1).block_on(check);
    check();
}

/// Guards interrupt and stop: each ends a task's recv (Interrupted, then Other with Stopped inside), and a signal that comes later is kept.
#[test]
fn interrupt_and_stop_end_the_wait() {
    let _serial = serial();
    let rt = rt(1);
    rt.block_on(|| {
        let signals = Arc::new(Signals::new(&[SIGUSR1]).unwrap());
        type Signal =
            fn(&spindle::JoinHandle<io::Result<c_int>>) -> Result<(), spindle::NoSuchTask>;
        let cases: [(Signal, ErrorKind, WaitError); 2] = [
            (
                |h| h.interrupt(),
                ErrorKind::Interrupted,
                WaitError::Interrupted,
            ),
            (|h| h.stop(), ErrorKind::Other, WaitError::Stopped),
        ];
        for (signal, kind, why) in cases {
            let started = Arc::new(AtomicBool::new(false));
            let waiter = {
                let (signals, started) = (signals.clone(), started.clone());
                spindle::spawn(move || {
                    started.store(true, SeqCst);
                    within_backstop(|| signals.recv())
                })
            };
            nap_until(&started);
            spindle::sleep(Duration::from_millis(5)).unwrap();
            signal(&waiter).expect("the waiter ended before it was signalled");
            let t = Instant::now();
            let e = waiter.join().unwrap().unwrap_err();
            assert!(t.elapsed() < PROMPTLY, "took {:?}", t.elapsed());
            assert_eq!(e.kind(), kind, "{e:?}");
            assert_eq!(inner(&e), Some(why), "{e:?}");
        }
        raise(SIGUSR1);
        assert_eq!(within_backstop(|| signals.recv()).unwrap(), SIGUSR1);
    });
}

/// Guards fan-out: two Signals of one signal, waited on in two tasks, both receive its one delivery.
#[test]
fn every_signals_of_a_signal_receives_each_delivery() {
    let _serial = serial();
    let rt = rt(1);
    rt.block_on(|| {
        let started = Arc::new(AtomicBool::new(false));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let signals = Signals::new(&[SIGUSR2]).unwrap();
                let started = started.clone();
                spindle::spawn(move || {
                    started.store(true, SeqCst);
                    within_backstop(|| signals.recv())
                })
            })
            .collect();
        nap_until(&started);
        spindle::sleep(Duration::from_millis(5)).unwrap();
        raise(SIGUSR2);
        for w in waiters {
            assert_eq!(w.join().unwrap().unwrap(), SIGUSR2);
        }
    });
}

/// Guards bad input: signals that cannot be waited for, numbers that name no signal and an empty set are InvalidInput, never a panic, and leave no fd open.
#[test]
fn signals_that_cannot_be_waited_for_are_invalid_input() {
    let _serial = serial();
    let before = open_fds();
    let bad: &[&[c_int]] = &[
        &[libc::SIGKILL],
        &[libc::SIGSTOP],
        &[libc::SIGSEGV],
        &[libc::SIGBUS],
        &[libc::SIGILL],
        &[libc::SIGFPE],
        &[0],
        &[-1],
        &[libc::SIGRTMAX() + 1],
        &[1000],
        &[SIGUSR1, libc::SIGKILL],
        &[],
    ];
    for signals in bad {
        let e = Signals::new(signals).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{signals:?}: {e:?}");
    }
    assert_eq!(open_fds(), before, "a refused Signals left an fd open");
}

/// Guards drop: a Signals that was waited on in a task (its fd registered in the worker's poller) closes every fd it opened, its registrations' included.
#[test]
fn dropping_signals_closes_its_fds() {
    let _serial = serial();
    let rt = rt(1);
    let round = || {
        rt.block_on(|| {
            let signals = Signals::new(&[SIGUSR1, SIGUSR2]).unwrap();
            let opened = open_fds();
            let waiter = spindle::spawn(move || within_backstop(|| signals.recv()));
            spindle::sleep(Duration::from_millis(5)).unwrap();
            raise(SIGUSR1);
            assert_eq!(waiter.join().unwrap().unwrap(), SIGUSR1);
            opened
        })
    };
    // The first round also makes the worker's poller, which stays.
    round();
    let before = open_fds();
    for _ in 0..3 {
        let opened = round();
        assert!(opened > before, "no fd opened: the count sees nothing");
        assert_eq!(open_fds(), before, "a dropped Signals left an fd open");
    }
}
