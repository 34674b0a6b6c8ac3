//! Leak checks for I/O, in a binary of their own: they count the process's
//! open fds and the global timer's pending entries, which tests running
//! beside them would change. Every kind of wait is exercised, ended every
//! way (data, EOF, socket timeout, deadline scope, interrupt, stop,
//! refusal); afterwards no fd stays in the runtime's pollers, no timer
//! stays armed, and no fd stays open.

mod common;
mod net_common;

use common::rt;
use net_common::{echo_server, expect_err, signalled, tcp_pair, BACKSTOP, LOOPBACK, SETTLE};
use spindle::io::{wait_fd, Interest};
use spindle::net::{TcpListener, TcpStream, UdpSocket, UnixStream};
use spindle::Runtime;
use spindle_testkit::pattern;
use std::fmt::Debug;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The process's open fds, each as "number -> what it is".
fn open_fds() -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .filter_map(|e| e.ok())
        .map(|e| {
            let target = std::fs::read_link(e.path())
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "(closed meanwhile)".to_owned());
            format!("{} -> {target}", e.file_name().to_string_lossy())
        })
        .collect();
    fds.sort();
    fds
}

/// Polls `now` for up to 10 s until it gives `want`; then asserts it does.
#[track_caller]
fn settles_to<T: PartialEq + Debug>(what: &str, want: T, mut now: impl FnMut() -> T) {
    let t = Instant::now();
    while now() != want && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(now(), want, "{what}");
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

/// Every kind of socket and wait, in tasks of `rt`, each ended some way.
fn exercise(rt: &Runtime) {
    const CONNS: usize = 50;
    rt.block_on(|| {
        // Echoed connections, each read with a socket timeout armed.
        let listener = TcpListener::bind(LOOPBACK).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = spindle::spawn(move || echo_server(listener, CONNS));
        let clients: Vec<_> = (0..CONNS)
            .map(|i| {
                spindle::spawn(move || {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.set_read_timeout(Some(BACKSTOP)).unwrap();
                    let msg = pattern(i as u64, 1000);
                    s.write_all(&msg).unwrap();
                    let mut back = vec![0u8; msg.len()];
                    s.read_exact(&mut back).unwrap();
                    assert!(back == msg);
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        assert_eq!(server.join().unwrap(), (CONNS * 1000) as u64);

        // Reads ended by a socket timeout and by a deadline scope; a write
        // ended by a socket timeout; a read ended by EOF.
        let (c, s) = tcp_pair();
        s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        expect_err((&s).read(&mut [0u8; 8]), "a read that times out");
        s.set_read_timeout(Some(BACKSTOP)).unwrap();
        let soon = Instant::now() + Duration::from_millis(10);
        expect_err(
            spindle::with_deadline(soon, || (&s).read(&mut [0u8; 8])),
            "a read in a deadline scope",
        );
        c.set_write_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let mut sent = 0;
        let chunk = vec![0u8; 64 * 1024];
        for _ in 0..4096 {
            match (&c).write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert!(sent > 0);
        drop(c);
        let mut rest = Vec::new();
        (&s).read_to_end(&mut rest).unwrap();
        assert_eq!(rest.len(), sent);

        // A refused connect and a connect_timeout.
        let closed = std::net::TcpListener::bind(LOOPBACK)
            .unwrap()
            .local_addr()
            .unwrap();
        expect_err(TcpStream::connect(closed).map(drop), "a refused connect");
        expect_err(
            TcpStream::connect_timeout(&closed, BACKSTOP).map(drop),
            "a refused connect_timeout",
        );

        // UDP: a datagram waited for, and a recv that times out.
        let a = UdpSocket::bind(LOOPBACK).unwrap();
        let b = UdpSocket::bind(LOOPBACK).unwrap();
        let b_addr = b.local_addr().unwrap();
        b.set_read_timeout(Some(BACKSTOP)).unwrap();
        let receiver = spindle::spawn(move || {
            let mut buf = [0u8; 16];
            let got = b.recv_from(&mut buf).map(|(n, _)| n);
            b.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
            (got, b.recv_from(&mut buf).map(|(n, _)| n))
        });
        spindle::sleep(SETTLE).unwrap();
        assert_eq!(a.send_to(b"u", b_addr).unwrap(), 1);
        let (got, timed_out) = receiver.join().unwrap();
        assert_eq!(got.unwrap(), 1);
        expect_err(timed_out, "a UDP recv that times out");

        // A Unix pair: a read waited for, then EOF.
        let (x, y) = UnixStream::pair().unwrap();
        y.set_read_timeout(Some(BACKSTOP)).unwrap();
        let reader = spindle::spawn(move || {
            let mut got = Vec::new();
            (&y).read_to_end(&mut got).map(|_| got.len())
        });
        spindle::sleep(SETTLE).unwrap();
        (&x).write_all(b"unix").unwrap();
        drop(x);
        assert_eq!(reader.join().unwrap().unwrap(), 4);

        // wait_fd: a wait woken by a write, and one that times out.
        let (r, w) = pipe();
        let waiter = spindle::spawn(move || {
            wait_fd(
                r.as_fd(),
                Interest::Readable,
                Some(Instant::now() + BACKSTOP),
            )
        });
        spindle::sleep(SETTLE).unwrap();
        // SAFETY: writes one byte from a live one-byte buffer to a valid fd.
        let n = unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        assert_eq!(n, 1);
        waiter.join().unwrap().unwrap();
        let (r, _w) = pipe();
        let soon = Instant::now() + Duration::from_millis(10);
        expect_err(
            wait_fd(r.as_fd(), Interest::Readable, Some(soon)),
            "a wait_fd that times out",
        );
    });

    // Waits ended by an interrupt and by a stop.
    let (c, s) = tcp_pair();
    s.set_read_timeout(Some(BACKSTOP)).unwrap();
    let (r, _) = signalled(rt, spindle::interrupt, move || {
        let r = (&s).read(&mut [0u8; 8]);
        drop(s);
        r
    });
    expect_err(r, "an interrupted read");
    drop(c);
    let listener = TcpListener::bind(LOOPBACK).unwrap();
    let (r, _) = signalled(rt, spindle::stop, move || {
        listener.accept().map(|(_, peer)| peer)
    });
    expect_err(r, "a stopped accept");
}

/// One round on a runtime of its own: exercise it, check that its pollers
/// and the global timer are left empty, shut it down.
fn round() {
    let rt = rt(2);
    exercise(&rt);
    settles_to(
        "fds left registered in the runtime's pollers once every task ended",
        0,
        || rt.stats().io_sources,
    );
    // The runtime's stall watchdog is a periodic timer: shut down first.
    rt.shutdown();
    common::wait_for_no_pending_timer();
}

/// Guards against leaks of I/O: after every kind of wait, ended every way, no fd stays registered, no timer stays armed, no fd stays open.
#[test]
fn io_leaves_no_registration_timer_or_fd_behind() {
    // The first round starts what starts once per process (the timer
    // thread, the blocking pool, anything lazily opened).
    round();
    let before = open_fds();
    round();
    let t = Instant::now();
    let mut after = open_fds();
    while after.len() != before.len() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
        after = open_fds();
    }
    assert_eq!(
        after.len(),
        before.len(),
        "open fds before the round: {before:#?}\nafter it: {after:#?}"
    );
}
