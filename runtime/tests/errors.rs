//! Errors that compose: every error is `Send + Sync + 'static`, so one
//! function can `?` a sleep, a lock and a join into a boxed error, and the
//! helpers and conversions say what ended a wait.

mod common;

use common::{rt, wait_for};
use spindle::io::wait_error;
use spindle::net::{TcpListener, TcpStream};
use spindle::sync::mpsc::{self, RecvError, RecvTimeoutError};
use spindle::sync::{oneshot, watch};
use spindle::{JoinError, SleepError, WaitError};
use std::error::Error;
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn assert_error<E: Error + Send + Sync + 'static>() {}

/// Guards the bounds of every error type of the crate's API.
#[test]
fn every_error_is_send_sync_static() {
    assert_error::<JoinError>();
    assert_error::<SleepError>();
    assert_error::<WaitError>();
    assert_error::<spindle::NoSuchTask>();
    assert_error::<spindle::SetWorkersError>();
    assert_error::<spindle::sync::CountOverflow>();
    assert_error::<spindle::sync::mpsc::RecvError>();
    assert_error::<spindle::sync::mpsc::RecvTimeoutError>();
    assert_error::<spindle::sync::watch::SendError<String>>();
    assert_error::<spindle_timer::TimerError>();
}

type BoxError = Box<dyn Error + Send + Sync>;

/// One function that `?`s a sleep, a lock and a join.
fn sleep_lock_join(m: &spindle::sync::Mutex<u32>) -> Result<u32, BoxError> {
    spindle::sleep(Duration::from_millis(1))?;
    let v = *m.lock()?;
    let doubled = spindle::spawn(move || v * 2).join()?;
    Ok(doubled)
}

/// Guards `?` into a boxed error: a value comes through, and a join's
/// panic comes out as an error that names it.
#[test]
fn one_function_questions_a_sleep_a_lock_and_a_join() {
    let rt = rt(2);
    let m = spindle::sync::Mutex::new(21);
    assert_eq!(rt.block_on(|| sleep_lock_join(&m)).unwrap(), 42);
    let e: BoxError = rt
        .block_on(|| -> Result<(), BoxError> {
            spindle::spawn(|| panic!("a planned panic")).join()?;
            Ok(())
        })
        .unwrap_err();
    assert!(e.to_string().contains("a planned panic"), "{e}");
    let join = e.downcast::<JoinError>().unwrap();
    assert!(join.is_panic());
    assert_eq!(
        join.into_panic().unwrap().downcast_ref::<&str>(),
        Some(&"a planned panic")
    );
}

/// Guards the helpers and the conversions, on errors from real waits.
#[test]
fn helpers_and_conversions_say_what_ended_a_wait() {
    let rt = rt(1);
    let (sleep, join) = rt.block_on(|| {
        spindle::with_deadline(Instant::now() + Duration::from_millis(5), || {
            let sleep = spindle::sleep(Duration::from_secs(30)).unwrap_err();
            let h = spindle::spawn(|| spindle::sleep(Duration::from_millis(50)));
            (sleep, h.join().unwrap_err())
        })
    });
    assert!(sleep.is_deadline_exceeded() && !sleep.is_interrupted());
    assert!(join.is_deadline_exceeded() && !join.is_cancelled());
    let wait: WaitError = sleep.into();
    assert!(wait.is_deadline_exceeded());
    let io_err: io::Error = sleep.into();
    assert_eq!(io_err.kind(), io::ErrorKind::TimedOut);
    assert_eq!(
        io_err.get_ref().and_then(|e| e.downcast_ref::<WaitError>()),
        Some(&WaitError::DeadlineExceeded)
    );
    let io_err: io::Error = join.into();
    assert_eq!(io_err.kind(), io::ErrorKind::TimedOut);
    let interrupted: io::Error = WaitError::Interrupted.into();
    assert_eq!(interrupted.kind(), io::ErrorKind::Interrupted);
    // A stop is never `Interrupted`, which std's retry loops swallow.
    let stopped: io::Error = SleepError::Stopped.into();
    assert_eq!(stopped.kind(), io::ErrorKind::Other);
}

/// What one wait of each error type says it was ended by:
/// `(is_interrupted(), is_stopped())`.
type Ends = Vec<(&'static str, (bool, bool))>;

/// Ends one wait of each error type that has `is_interrupted` and
/// `is_stopped`, in the calling task, with `signal` sent to the task
/// itself before each (an interrupt is remembered for the next
/// interruptible wait; a stop is sticky).
fn end_each_wait_with(signal: fn(spindle::TaskId) -> Result<(), spindle::NoSuchTask>) -> Ends {
    let me = || spindle::current().expect("a task");
    let hour = Duration::from_secs(3600);
    let (_tx, rx) = mpsc::channel::<u32>();
    let (full, _keep) = mpsc::sync_channel::<u32>(1);
    full.try_send(0).unwrap();
    let (_otx, mut orx) = oneshot::channel::<u32>();
    let (_wtx, mut wrx) = watch::channel(0u32);
    let butex = spindle::Butex::new(0);
    let mut ends = Ends::new();
    signal(me()).unwrap();
    let e = spindle::sleep(hour).unwrap_err();
    ends.push(("SleepError", (e.is_interrupted(), e.is_stopped())));
    signal(me()).unwrap();
    let e = butex.wait(0, None).unwrap_err();
    ends.push(("WaitError", (e.is_interrupted(), e.is_stopped())));
    signal(me()).unwrap();
    let e = rx.recv().unwrap_err();
    ends.push(("mpsc RecvError", (e.is_interrupted(), e.is_stopped())));
    signal(me()).unwrap();
    let e = rx.recv_timeout(hour).unwrap_err();
    ends.push(("RecvTimeoutError", (e.is_interrupted(), e.is_stopped())));
    signal(me()).unwrap();
    let e = full.send(1).unwrap_err();
    ends.push(("SendError", (e.is_interrupted(), e.is_stopped())));
    signal(me()).unwrap();
    let e = orx.recv().unwrap_err();
    ends.push(("oneshot RecvError", (e.is_interrupted(), e.is_stopped())));
    signal(me()).unwrap();
    let e = wrx.changed().unwrap_err();
    ends.push(("watch RecvError", (e.is_interrupted(), e.is_stopped())));
    ends
}

/// `is_interrupted` means an interrupt and `is_stopped` a stop, in every
/// error type that has them, as `WaitError` documents: a stop is never
/// counted as an interrupt.
#[test]
fn is_interrupted_and_is_stopped_mean_the_same_in_every_error() {
    let rt = rt(1);
    let interrupted = rt.spawn(|| end_each_wait_with(spindle::interrupt));
    for (what, end) in interrupted.join().unwrap() {
        assert_eq!(end, (true, false), "{what} ended by an interrupt");
    }
    let stopped = rt.spawn(|| end_each_wait_with(spindle::stop));
    for (what, end) in stopped.join().unwrap() {
        assert_eq!(end, (false, true), "{what} ended by a stop");
    }
}

/// Every receive error becomes the `io::Error` documented for it: a
/// wait's end as the I/O layer reports it, with the `WaitError` inside
/// (which `wait_error` reads), a closed channel as `UnexpectedEof` with
/// the receive's error inside.
#[test]
fn receive_errors_convert_into_io_errors() {
    use io::ErrorKind::{Interrupted, Other, TimedOut, UnexpectedEof};
    let cases = [
        (RecvError::Disconnected, UnexpectedEof, None),
        (
            RecvError::DeadlineExceeded,
            TimedOut,
            Some(WaitError::DeadlineExceeded),
        ),
        (
            RecvError::Interrupted,
            Interrupted,
            Some(WaitError::Interrupted),
        ),
        (RecvError::Stopped, Other, Some(WaitError::Stopped)),
    ];
    for (recv, kind, ended) in cases {
        let e = io::Error::from(recv);
        assert_eq!((e.kind(), wait_error(&e)), (kind, ended), "{recv:?}");
        let timeout = io::Error::from(RecvTimeoutError::from(recv));
        assert_eq!((timeout.kind(), wait_error(&timeout)), (kind, ended));
    }
    let closed = io::Error::from(RecvError::Disconnected);
    assert_eq!(
        closed.get_ref().and_then(|i| i.downcast_ref::<RecvError>()),
        Some(&RecvError::Disconnected)
    );
    // A receive's own timeout is the operation's, as a socket's is.
    let own = io::Error::from(RecvTimeoutError::Timeout);
    assert_eq!((own.kind(), wait_error(&own)), (TimedOut, None));
}

/// Receives of each channel, `?`d into an `io::Result`: a deadline scope
/// is told apart by `wait_error`, a closed channel is `UnexpectedEof`.
#[test]
fn receives_question_into_io_results() {
    fn recv_mpsc(rx: &mpsc::Receiver<u32>) -> io::Result<u32> {
        Ok(rx.recv()?)
    }
    fn recv_oneshot(rx: &mut oneshot::Receiver<u32>) -> io::Result<u32> {
        Ok(rx.recv()?)
    }
    fn changed(rx: &mut watch::Receiver<u32>) -> io::Result<u32> {
        rx.changed()?;
        Ok(*rx.borrow())
    }
    let rt = rt(2);
    let (mtx, mrx) = mpsc::channel::<u32>();
    let (otx, mut orx) = oneshot::channel::<u32>();
    let (wtx, mut wrx) = watch::channel(0u32);
    let (errors, mrx, mut orx, mut wrx) = rt.block_on(move || {
        let errors = spindle::with_deadline(Instant::now() + Duration::from_millis(5), || {
            [
                recv_mpsc(&mrx).unwrap_err(),
                recv_oneshot(&mut orx).unwrap_err(),
                changed(&mut wrx).unwrap_err(),
            ]
        });
        (errors, mrx, orx, wrx)
    });
    for e in &errors {
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e:?}");
        assert_eq!(wait_error(e), Some(WaitError::DeadlineExceeded), "{e:?}");
    }
    wtx.send(4).unwrap();
    assert_eq!(changed(&mut wrx).unwrap(), 4);
    drop((mtx, otx, wtx));
    for e in [
        recv_mpsc(&mrx).unwrap_err(),
        recv_oneshot(&mut orx).unwrap_err(),
        changed(&mut wrx).unwrap_err(),
    ] {
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e:?}");
        assert_eq!(wait_error(&e), None, "a closed channel is no wait's end");
    }
}

/// A connected pair of loopback TCP streams (client, server side).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

/// `wait_error` on sockets: a read that a deadline scope, an interrupt or
/// a stop ends says which; one that the socket's own timeout ends (of the
/// same kind, `TimedOut`, as a deadline's) says nothing, nor does a
/// socket's own error, nor an error that is no wait's.
#[test]
fn wait_error_tells_the_tasks_ends_from_the_sockets() {
    let rt = rt(2);
    let backstop = Some(Duration::from_secs(30));

    let (deadline, timeout) = rt.block_on(|| {
        let (_client, server) = tcp_pair();
        server.set_read_timeout(backstop).unwrap();
        let soon = Instant::now() + Duration::from_millis(20);
        let deadline = spindle::with_deadline(soon, || (&server).read(&mut [0u8; 8]));
        server
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let timeout = (&server).read(&mut [0u8; 8]);
        (deadline.unwrap_err(), timeout.unwrap_err())
    });
    assert_eq!(deadline.kind(), io::ErrorKind::TimedOut);
    assert_eq!(wait_error(&deadline), Some(WaitError::DeadlineExceeded));
    assert_eq!(timeout.kind(), io::ErrorKind::TimedOut);
    assert_eq!(wait_error(&timeout), None, "the socket's own timeout");

    // On a plain thread too (its socket waits poll).
    let (_client, server) = tcp_pair();
    server.set_read_timeout(backstop).unwrap();
    let soon = Instant::now() + Duration::from_millis(20);
    let e = spindle::with_deadline(soon, || (&server).read(&mut [0u8; 8])).unwrap_err();
    assert_eq!(wait_error(&e), Some(WaitError::DeadlineExceeded));
    server
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let e = (&server).read(&mut [0u8; 8]).unwrap_err();
    assert_eq!((e.kind(), wait_error(&e)), (io::ErrorKind::TimedOut, None));

    // A task's read, interrupted, then stopped.
    for stop in [false, true] {
        let (_client, server) = tcp_pair();
        server.set_read_timeout(backstop).unwrap();
        let reading = Arc::new(AtomicBool::new(false));
        let h = {
            let reading = reading.clone();
            rt.spawn(move || {
                reading.store(true, Ordering::SeqCst);
                (&server).read(&mut [0u8; 8]).unwrap_err()
            })
        };
        wait_for("the reader to start", || reading.load(Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(10));
        if stop {
            h.stop().unwrap();
        } else {
            h.interrupt().unwrap();
        }
        let e = h.join().unwrap();
        let expected = if stop {
            WaitError::Stopped
        } else {
            WaitError::Interrupted
        };
        assert_eq!(wait_error(&e), Some(expected), "{e:?}");
    }

    // A socket's own error, and errors that are no wait's.
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        TcpStream::connect(addr).unwrap_err()
    };
    assert_eq!(wait_error(&refused), None, "{refused:?}");
    assert_eq!(wait_error(&io::Error::other("no wait")), None);
    let eintr = io::Error::from(io::ErrorKind::Interrupted);
    assert_eq!(
        wait_error(&eintr),
        None,
        "a syscall's EINTR is no wait's end"
    );
    assert_eq!(wait_error(&WaitError::WouldBlock.into()), None);
    // The other conversions of spindle's errors.
    assert_eq!(
        wait_error(&JoinError::DeadlineExceeded.into()),
        Some(WaitError::DeadlineExceeded)
    );
    assert_eq!(
        wait_error(&SleepError::Interrupted.into()),
        Some(WaitError::Interrupted)
    );
}
