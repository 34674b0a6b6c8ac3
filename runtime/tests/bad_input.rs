//! Bad input, answered: each test here is a row (or a few rows) of the
//! table in `docs/errors.md`, "Bad input", which names for every public
//! call what it does with input out of its range: a typed error or a
//! documented behaviour, never a hang, a panic inside the runtime, or a
//! lost task. Rows whose behaviour another test file already holds cite
//! that test instead.
//!
//! A call that could hang if it misbehaved runs under [`within`], which
//! fails the test after `LONG` instead of hanging it.

mod common;
mod net_common;

use common::rt;
use net_common::{assert_wait_error, BACKSTOP};
use spindle::io::{wait_fd, Interest};
use spindle::net::{TcpListener, TcpStream, UdpSocket, UnixListener, UnixStream};
use spindle::sync::mpsc::{self, RecvTimeoutError, SendErrorKind, TrySendError};
use spindle::sync::{oneshot, watch, CountdownEvent, Mutex, OnceCell, RwLock, Select, Semaphore};
use spindle::{Butex, Handle, NoSuchTask, Runtime, SetWorkersError, SleepError, TaskId, WaitError};
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// What only a hang reaches.
const LONG: Duration = Duration::from_secs(60);

/// How long a test lets a wait run before it looks whether it ended on
/// its own (a wait of `Duration::MAX` must not).
const SETTLE: Duration = Duration::from_millis(50);

/// Runs `f` on a thread of its own and returns its result, or fails the
/// test, naming `what`, if it has not returned within `LONG` (the thread
/// is left behind).
#[track_caller]
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(LONG) {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("{what} did not return within {LONG:?}"),
    }
}

/// An instant long past.
fn past() -> Instant {
    let now = Instant::now();
    now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
}

// ---- Builder and Runtime ----------------------------------------------

/// `Builder::stall_threshold(Duration::ZERO)` is 1 ms (the documented
/// floor): a task that runs without suspending is reported. With
/// `Duration::MAX` nothing overflows, and nothing is reported.
#[test]
fn stall_thresholds_of_zero_and_max_are_taken() {
    let rt = Runtime::builder()
        .workers(1)
        .stall_threshold(Duration::ZERO)
        .build()
        .unwrap();
    let stalls = rt.spawn(|| {
        // Runs without suspending until the watchdog has reported it.
        let t = Instant::now();
        while Handle::current().stats().stalls == 0 && t.elapsed() < LONG {
            std::hint::spin_loop();
        }
        Handle::current().stats().stalls
    });
    assert!(
        stalls.join().unwrap() > 0,
        "a zero threshold reports nothing"
    );

    let rt = Runtime::builder()
        .workers(1)
        .stall_threshold(Duration::MAX)
        .build()
        .unwrap();
    let h = rt.spawn(|| {
        let t = Instant::now();
        while t.elapsed() < SETTLE {
            std::hint::spin_loop();
        }
        7
    });
    assert_eq!(h.join().unwrap(), 7);
    assert_eq!(rt.stats().stalls, 0);
}

/// `Builder::idle_poll(Duration::MAX)` is an hour (documented), and
/// `sleep_spin(Duration::ZERO)` no spin: the runtimes run tasks and shut
/// down.
#[test]
fn idle_poll_and_sleep_spin_at_their_extremes_are_taken() {
    let rt = Runtime::builder()
        .workers(1)
        .idle_poll(Duration::MAX)
        .sleep_spin(Duration::ZERO)
        .build()
        .unwrap();
    let h = rt.spawn(|| spindle::sleep(Duration::from_millis(2)));
    assert_eq!(h.join().unwrap(), Ok(()));
    within("the shutdown of an idle-polling runtime", move || {
        rt.shutdown()
    });
}

/// `Runtime::set_workers(0)` is a shrink, `usize::MAX` too many; the count
/// it has already is fine.
#[test]
fn set_workers_to_zero_or_max_is_refused() {
    let rt = rt(1);
    assert_eq!(
        rt.set_workers(0),
        Err(SetWorkersError::Shrink {
            current: 1,
            requested: 0
        })
    );
    assert!(matches!(
        rt.set_workers(usize::MAX),
        Err(SetWorkersError::TooMany { .. })
    ));
    assert_eq!(rt.set_workers(1), Ok(()));
    assert_eq!(rt.workers(), 1);
}

/// `block_on` from inside a task suspends that task and runs the closure
/// as a task, on the caller's own runtime (one worker: the closure runs
/// on the worker the caller waits on) as on another.
#[test]
fn block_on_from_a_task_suspends_only_that_task() {
    let got = within("block_on from a task of its own one-worker runtime", || {
        let rt = rt(1);
        let inner = rt.block_on(|| {
            Handle::current().block_on(|| {
                // The inner closure is a task of the same runtime, and the
                // worker is free for others while it waits.
                let child = spindle::spawn(|| 2);
                spindle::sleep(Duration::from_millis(1)).unwrap();
                spindle::current().is_some() as u32 + child.join().unwrap()
            })
        });
        // And from a task of that runtime, on itself by its `Runtime`.
        let rt = Arc::new(rt);
        let rt2 = rt.clone();
        let again = rt.spawn(move || rt2.block_on(|| 4)).join().unwrap();
        (inner, again)
    });
    assert_eq!(got, (3, 4));
}

// ---- Tasks --------------------------------------------------------------

/// `interrupt` and `stop` of an id that names no live task, whatever its
/// bits, are `NoSuchTask`; an id whose task ended never reaches the task
/// that took its slot afterwards.
#[test]
fn forged_and_stale_task_ids_reach_no_task() {
    for raw in [u64::MAX, 1 << 63, 0xffff_ff00_0000_0000, (1 << 40) - 1] {
        let id = TaskId::from_u64(raw);
        assert_eq!(spindle::interrupt(id), Err(NoSuchTask), "{raw:#x}");
        assert_eq!(spindle::stop(id), Err(NoSuchTask), "{raw:#x}");
    }
    let rt = rt(1);
    let (stale, slept) = rt.block_on(|| {
        let ended = spindle::spawn(|| ());
        let stale = ended.id();
        ended.join().unwrap();
        // In the slot the ended task gave back (the worker's slot cache is
        // a stack): its id differs only by version. The low 24 bits of an
        // id are its slot.
        let (ready_tx, ready_rx) = oneshot::channel();
        let sleeper = spindle::spawn(move || {
            let _ = ready_tx.send(());
            spindle::sleep(Duration::from_millis(20))
        });
        const SLOT: u64 = (1 << 24) - 1;
        assert_eq!(
            sleeper.id().as_u64() & SLOT,
            stale.as_u64() & SLOT,
            "the stale id's slot is not the sleeper's: the test tests nothing"
        );
        let mut ready_rx = ready_rx;
        ready_rx.recv().unwrap();
        let r = (spindle::interrupt(stale), spindle::stop(stale));
        (r, sleeper.join().unwrap())
    });
    assert_eq!(stale, (Err(NoSuchTask), Err(NoSuchTask)));
    assert_eq!(slept, Ok(()), "the stale id's signals reached another task");
}

/// A task's name may be any string, a NUL byte included: it is kept and
/// shown, never handed to the OS.
#[test]
fn any_task_name_is_taken() {
    let rt = rt(1);
    let name = rt.block_on(|| {
        spindle::task::Builder::new()
            .name("a\0b")
            .spawn(spindle::task::current_name)
            .unwrap()
            .join()
            .unwrap()
    });
    assert_eq!(name.as_deref(), Some("a\0b"));
}

// ---- Sleeps, timeouts and deadlines --------------------------------------

/// Each wait given `Duration::MAX` (or a deadline beyond the clock's
/// range) waits until something else ends it: none overflows, none ends
/// at once; an interrupt ends each.
#[test]
fn waits_of_duration_max_last_until_interrupted() {
    type Wait = Box<dyn FnOnce() -> Result<(), String> + Send>;
    let far = Instant::now() + Duration::from_secs(u64::MAX / 4);
    let (keep_tx, rx) = mpsc::channel::<u32>();
    let (full, keep_full_rx) = mpsc::sync_channel::<u32>(1);
    full.try_send(0).unwrap();
    let (keep_otx, mut orx) = oneshot::channel::<u32>();
    let (keep_wtx, mut wrx) = watch::channel(0u32);
    let (sel_keep_tx, sel_rx) = mpsc::channel::<u32>();
    let (socket, keep_peer) = net_common::tcp_pair();
    let butex = Arc::new(Butex::new(0));
    let b = butex.clone();
    let waits: Vec<(&str, Wait)> = vec![
        (
            "sleep(MAX)",
            Box::new(|| fmt(spindle::sleep(Duration::MAX))),
        ),
        (
            "usleep(u64::MAX)",
            Box::new(|| fmt(spindle::usleep(u64::MAX))),
        ),
        (
            "sleep_until(far)",
            Box::new(move || fmt(spindle::sleep_until(far))),
        ),
        (
            "Butex::wait(far)",
            Box::new(move || fmt(b.wait(0, Some(far)))),
        ),
        (
            "with_deadline(far)",
            Box::new(move || {
                fmt(spindle::with_deadline(far, || {
                    spindle::sleep(Duration::MAX)
                }))
            }),
        ),
        (
            "recv_timeout(MAX)",
            Box::new(move || fmt(rx.recv_timeout(Duration::MAX).map(drop))),
        ),
        (
            "send_timeout(MAX)",
            Box::new(move || {
                let r = full.send_timeout(1, Duration::MAX);
                fmt(r.map_err(|e| e.kind()))
            }),
        ),
        (
            "oneshot recv_timeout(MAX)",
            Box::new(move || fmt(orx.recv_timeout(Duration::MAX).map(drop))),
        ),
        (
            "watch changed_timeout(MAX)",
            Box::new(move || fmt(wrx.changed_timeout(Duration::MAX))),
        ),
        (
            "select_timeout(MAX)",
            Box::new(move || {
                let mut sel = Select::new();
                sel.recv(&sel_rx);
                fmt(sel.select_timeout(Duration::MAX).map(|op| op.index()))
            }),
        ),
        (
            "a read with set_read_timeout(MAX)",
            Box::new(move || {
                socket.set_read_timeout(Some(Duration::MAX)).unwrap();
                fmt((&socket).read(&mut [0u8; 8]).map_err(|e| e.kind()))
            }),
        ),
    ];
    let rt = rt(2);
    let tasks: Vec<_> = waits
        .into_iter()
        .map(|(what, wait)| (what, rt.spawn(wait)))
        .collect();
    thread::sleep(SETTLE);
    for (what, task) in &tasks {
        assert!(!task.is_finished(), "{what} ended on its own");
    }
    for (what, task) in tasks {
        task.interrupt().unwrap();
        let r = within(what, move || task.join().unwrap());
        let r = r.expect_err(what);
        assert!(r.contains("Interrupted"), "{what} ended with {r}");
    }
    drop((
        keep_tx,
        keep_full_rx,
        keep_otx,
        keep_wtx,
        sel_keep_tx,
        keep_peer,
    ));
}

/// A result as text, for one list of waits of different types.
fn fmt<T: std::fmt::Debug, E: std::fmt::Debug>(r: Result<T, E>) -> Result<(), String> {
    r.map(drop).map_err(|e| format!("{e:?}"))
}

/// A deadline in the past ends each wait at once with its own timeout,
/// and takes nothing: no lock, permit or message; what is there already
/// is taken without a wait. `connect_timeout` with `Duration::MAX` to a
/// live listener connects.
#[test]
fn past_deadlines_end_waits_at_once_and_take_nothing() {
    let rt = rt(2);
    rt.block_on(|| {
        let gone = past();
        // Channels: empty times out; a message there is taken.
        let (tx, rx) = mpsc::channel::<u32>();
        assert_eq!(rx.recv_deadline(gone), Err(RecvTimeoutError::Timeout));
        tx.send(5).unwrap();
        assert_eq!(rx.recv_deadline(gone), Ok(5));
        let (full, _rx) = mpsc::sync_channel::<u32>(1);
        full.try_send(0).unwrap();
        let e = full.send_deadline(1, gone).unwrap_err();
        assert_eq!((e.kind(), e.into_inner()), (SendErrorKind::Timeout, 1));
        let (_otx, mut orx) = oneshot::channel::<u32>();
        assert_eq!(orx.recv_deadline(gone), Err(RecvTimeoutError::Timeout));
        let (_wtx, mut wrx) = watch::channel(0u32);
        assert_eq!(wrx.changed_deadline(gone), Err(RecvTimeoutError::Timeout));
        let mut sel = Select::new();
        sel.recv(&rx);
        assert_eq!(sel.select_deadline(gone).err(), Some(WaitError::TimedOut));
        // Locks held elsewhere time out; free ones are taken.
        let m = Arc::new(Mutex::new(1));
        assert!(m.lock_until(Some(gone)).is_ok());
        let held = m.lock().unwrap();
        let m2 = m.clone();
        let r = spindle::spawn(move || m2.lock_until(Some(gone)).map(|_| ()));
        assert_eq!(r.join().unwrap(), Err(WaitError::TimedOut));
        drop(held);
        assert!(m.try_lock().is_some(), "the timed-out waiter took nothing");
        let l = RwLock::new(0);
        let reading = l.read().unwrap();
        assert_eq!(l.write_until(Some(gone)).err(), Some(WaitError::TimedOut));
        assert!(l.try_read().is_some(), "the writer left no mark");
        drop(reading);
        let sem = Semaphore::new(0);
        assert_eq!(
            sem.acquire_until(Some(gone)).err(),
            Some(WaitError::TimedOut)
        );
        sem.add_permits(1);
        assert_eq!(sem.available_permits(), 1);
        let ev = CountdownEvent::new(1);
        assert_eq!(ev.wait_until(gone), Err(WaitError::TimedOut));
        assert_eq!(ev.count(), 1);
        let cell = OnceCell::<u32>::new();
        assert_eq!(cell.wait_until(gone).err(), Some(WaitError::TimedOut));
        let butex = Butex::new(0);
        assert_eq!(butex.wait(0, Some(gone)), Err(WaitError::TimedOut));
        // A sleep until the past only yields.
        assert_eq!(spindle::sleep_until(gone), Ok(()));
        // An fd that is not ready times out; a ready one does not wait.
        let (a, b) = net_common::tcp_pair();
        let e = wait_fd(a.as_fd(), Interest::Readable, Some(gone)).unwrap_err();
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::TimedOut);
        (&b).write_all(b"x").unwrap();
        spindle_testkit::wait_for("the byte to arrive", || {
            wait_fd(a.as_fd(), Interest::Readable, Some(gone)).is_ok()
        });
        // A task spawned with a past deadline runs in an expired scope.
        let h = spindle::task::Builder::new()
            .deadline(Some(gone))
            .spawn(|| (spindle::sleep(Duration::from_secs(60)), 3))
            .unwrap();
        assert_eq!(h.join().unwrap(), (Err(SleepError::DeadlineExceeded), 3));
        // The longest timeout connects to a listener that is there.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let c = TcpStream::connect_timeout(&addr, Duration::MAX).unwrap();
        assert_eq!(c.peer_addr().unwrap(), addr);
    });
}

// ---- Channels -----------------------------------------------------------

/// `sync_channel` with an absurd bound (up to `usize::MAX`) allocates no
/// buffer of that size: it is made, and works, and a large bound is
/// honoured exactly.
#[test]
fn sync_channels_of_any_bound_are_made_and_hold_their_bound() {
    let rt = rt(1);
    rt.block_on(|| {
        for bound in [usize::MAX, 1 << 40, 1 << 32] {
            let (tx, rx) = mpsc::sync_channel::<u64>(bound);
            for i in 0..1000 {
                tx.try_send(i).unwrap();
            }
            tx.send_timeout(1000, Duration::MAX).unwrap();
            assert_eq!((0..1001).map(|_| rx.recv().unwrap()).sum::<u64>(), 500_500);
        }
        // A bound past the largest ring (16 384 slots of a `usize`): a
        // queue that grows with its messages, and holds its bound exactly.
        let bound = 20_000;
        let (tx, rx) = mpsc::sync_channel::<usize>(bound);
        for i in 0..bound {
            tx.try_send(i).unwrap();
        }
        assert_eq!(tx.try_send(bound), Err(TrySendError::Full(bound)));
        let e = tx.send_deadline(bound, past()).unwrap_err();
        assert_eq!(e.kind(), SendErrorKind::Timeout);
        // A receive makes room for one, and a waiting sender gets it.
        let sender = {
            let tx = tx.clone();
            spindle::spawn(move || tx.send(bound))
        };
        spindle::sleep(Duration::from_millis(5)).unwrap();
        assert!(
            !sender.is_finished(),
            "a send into a full channel did not wait"
        );
        assert_eq!(rx.recv(), Ok(0));
        assert_eq!(sender.join().unwrap().map_err(|e| e.kind()), Ok(()));
        assert_eq!(tx.try_send(0), Err(TrySendError::Full(0)));
        let got: Vec<usize> = (0..bound).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got, (1..=bound).collect::<Vec<_>>());
        drop(rx);
        assert_eq!(
            tx.try_send(1),
            Err(TrySendError::Disconnected(1)),
            "the receiver's drop disconnects"
        );
    });
}

/// `Semaphore::new` and `add_permits` past `MAX_PERMITS`, and
/// `acquire_many` of more than it, panic in the caller, as documented
/// (tokio's semaphore does the same): the semaphore is left as it was.
#[test]
fn semaphore_counts_past_max_permits_panic_in_the_caller() {
    let max = Semaphore::MAX_PERMITS;
    assert!(std::panic::catch_unwind(|| Semaphore::new(max + 1)).is_err());
    let sem = Semaphore::new(max);
    let add = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sem.add_permits(1)));
    assert!(add.is_err());
    assert_eq!(sem.available_permits(), max);
    let take = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sem.acquire_many(max + 1).map(drop)
    }));
    assert!(take.is_err());
    assert_eq!(sem.available_permits(), max);
    assert!(sem.try_acquire_many(max + 1).is_err(), "try_ never panics");
}

// ---- Sockets and fds ------------------------------------------------------

/// A listener on an address in use is `AddrInUse` (TCP, UDP, a Unix
/// socket's path), in a task as on a plain thread; a connect to a Unix
/// path that does not exist is `NotFound`.
#[test]
fn binding_an_address_in_use_is_addr_in_use() {
    let dir = tempdir();
    let path = dir.join("sock");
    let rt = rt(1);
    let check = move || {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = tcp.local_addr().unwrap();
        let e = TcpListener::bind(taken).map(drop).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddrInUse, "TCP {e}");
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let taken = udp.local_addr().unwrap();
        let e = UdpSocket::bind(taken).map(drop).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddrInUse, "UDP {e}");
        let _ = std::fs::remove_file(&path);
        let unix = UnixListener::bind(&path).unwrap();
        let e = UnixListener::bind(&path).map(drop).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddrInUse, "Unix {e}");
        drop(unix);
        std::fs::remove_file(&path).unwrap();
        let e = UnixStream::connect(&path).map(drop).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "Unix connect {e}");
    };
    let in_task = check.clone();
    rt.block_on(in_task);
    check();
    let _ = std::fs::remove_dir_all(dir);
}

/// A directory of this test's own under the system's temporary directory.
fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "spindle-bad-input-{}-{:?}",
        std::process::id(),
        thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A UDP datagram larger than the buffer fills the buffer, and the rest of
/// it is dropped (std's and the kernel's behaviour): the next receive gets
/// the next datagram. The same for `recv_from` and `peek_from`, which
/// leaves the datagram queued.
#[test]
fn a_datagram_larger_than_the_buffer_is_cut_to_it() {
    let rt = rt(1);
    rt.block_on(|| {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(BACKSTOP)).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let big: Vec<u8> = (0..200u8).collect();
        tx.send_to(&big, to).unwrap();
        tx.send_to(b"next", to).unwrap();
        tx.send_to(&big, to).unwrap();
        let mut small = [0u8; 10];
        let (n, from) = rx.peek_from(&mut small).unwrap();
        assert_eq!((n, from), (10, tx.local_addr().unwrap()));
        assert_eq!(rx.recv(&mut small).unwrap(), 10);
        assert_eq!(small, big[..10]);
        let mut buf = [0u8; 64];
        assert_eq!(rx.recv(&mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"next");
        let (n, _) = rx.recv_from(&mut small).unwrap();
        assert_eq!((n, small), (10, <[u8; 10]>::try_from(&big[..10]).unwrap()));
        // An empty buffer takes a datagram whole, as a zero-length read.
        tx.send_to(b"gone", to).unwrap();
        assert_eq!(rx.recv(&mut []).unwrap(), 0);
        tx.send_to(b"last", to).unwrap();
        assert_eq!(rx.recv(&mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"last");
    });
}

/// A read into an empty buffer waits, as std's (and the kernel's) does,
/// until the stream has data or ends, then returns 0 and leaves the data;
/// an interrupt ends the wait. A write of an empty buffer returns 0 at
/// once.
#[test]
fn empty_reads_wait_for_data_as_std_and_empty_writes_return_at_once() {
    let rt = rt(1);
    let (a, b) = net_common::tcp_pair();
    let (ua, ub) = UnixStream::pair().unwrap();
    let (a, ua) = (Arc::new(a), Arc::new(ua));
    let (ra, rua) = (a.clone(), ua.clone());
    let tcp = rt.spawn(move || (&*ra).read(&mut []).map_err(|e| e.kind()));
    let unix = rt.spawn(move || (&*rua).read(&mut []).map_err(|e| e.kind()));
    thread::sleep(SETTLE);
    assert!(
        !tcp.is_finished() && !unix.is_finished(),
        "an empty read did not wait"
    );
    (&b).write_all(b"x").unwrap();
    assert_eq!(
        within("an empty TCP read", move || tcp.join().unwrap()),
        Ok(0)
    );
    unix.interrupt().unwrap();
    let r = within("an empty Unix read", move || unix.join().unwrap());
    assert_eq!(r, Err(ErrorKind::Interrupted));
    let (a2, ua2) = (a.clone(), ua.clone());
    let r = rt.block_on(move || {
        let mut byte = [0u8; 1];
        (
            (&*a2).read(&mut byte).map(|n| (n, byte[0])).unwrap(),
            (&*a2).write(&[]).unwrap(),
            (&*ua2).write(&[]).unwrap(),
        )
    });
    assert_eq!(r, ((1, b'x'), 0, 0), "the data stayed for the next read");
    drop(ub);
}

/// A peer that resets the connection after part of what a `read_exact`
/// waits for: the read ends with `ConnectionReset` (or, if the reset
/// arrives as the stream's end, `UnexpectedEof`), and the runtime goes
/// on. A reset that finds the task already blocked in a read is
/// `tests/net_tcp.rs`, `a_peer_reset_gives_connection_reset`.
#[test]
fn a_reset_in_the_middle_of_a_read_exact_ends_it() {
    let rt = rt(1);
    let (client, server) = net_common::tcp_pair();
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let reader = rt.spawn(move || {
        server.set_read_timeout(Some(BACKSTOP)).unwrap();
        s.store(true, Ordering::SeqCst);
        let mut b = [0u8; 8];
        (&server).read_exact(&mut b).map_err(|e| e.kind())
    });
    spindle_testkit::wait_for("the reader to start", || started.load(Ordering::SeqCst));
    (&client).write_all(b"half").unwrap();
    thread::sleep(Duration::from_millis(20));
    reset(client);
    let r = within("a read_exact whose peer reset", move || {
        reader.join().unwrap()
    });
    assert!(
        matches!(
            r,
            Err(ErrorKind::ConnectionReset) | Err(ErrorKind::UnexpectedEof)
        ),
        "{r:?}"
    );
    assert_eq!(rt.spawn(|| 1).join().unwrap(), 1);
}

/// Closes `s` with a reset (`SO_LINGER` of zero), not a FIN.
fn reset(s: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket fd and a `linger` of the size given.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "set SO_LINGER: {}", io::Error::last_os_error());
    drop(s);
}
