//! The cooperative budget for I/O (`docs/io.md`, "The cooperative
//! budget"): a task whose socket never makes it wait (its peer always has
//! data ready, or always has room) yields now and then, so the other
//! tasks of its worker still run.
//!
//! Each test puts two tasks on a runtime of one worker: a *busy* one that
//! calls its socket in a loop that never has to wait (a plain thread of
//! the test keeps the socket ready, or, for `peek` and `wait_fd`, data
//! queued once and never read keeps it ready by construction), and a
//! *talker* that makes 100 request/response round trips with an echo
//! thread over a connection of its own. Without the budget the busy task holds the worker for good and
//! the round trips never happen. The tests assert that the round trips
//! complete, with a bound (10 s for 100) that only a starved talker
//! misses: they measure no speed.
//!
//! The busy loop ends when the test raises its `done` flag, which it does
//! whether the round trips completed or not, so a failure is reported
//! rather than hung on.

mod net_common;

use net_common::BACKSTOP;
use spindle::net::{TcpStream, UdpSocket, UnixStream};
use spindle::Runtime;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The round trips the talker makes.
const ROUND_TRIPS: u32 = 100;

/// How long the round trips may take before the test calls the talker
/// starved: some 1 000 times what they take on a busy 2-core machine.
const STARVED_AFTER: Duration = Duration::from_secs(10);

/// How a busy task and the thread that keeps its socket ready end.
#[derive(Clone, Default)]
struct Flags {
    /// Set by the test: the busy task's loop ends.
    done: Arc<AtomicBool>,
    /// Set by the test after the busy task has ended: the feeding (or
    /// draining) thread ends.
    feeder_done: Arc<AtomicBool>,
    /// Calls the busy task has made, so that the talker starts only once
    /// the busy loop runs.
    calls: Arc<AtomicU64>,
}

/// A connected pair of loopback TCP streams, both std's (blocking).
fn std_tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = std::net::TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    let (b, _) = listener.accept().expect("accept");
    (a, b)
}

/// Starts a thread that echoes what it reads on `s` until EOF.
fn echo_thread(mut s: std::net::TcpStream) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = [0u8; 64];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
    })
}

/// Runs `busy` as a task of a one-worker runtime, and beside it a talker
/// whose `ROUND_TRIPS` round trips go to an echo thread; returns whether
/// they completed within `STARVED_AFTER`, after ending everything.
/// `feeder` is the thread that keeps the busy task's socket ready; it
/// ends once `feeder_done` is set.
fn round_trips_beside(
    flags: &Flags,
    busy: impl FnOnce() -> io::Result<()> + Send + 'static,
    feeder: thread::JoinHandle<()>,
) -> bool {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let busy = rt.spawn(busy);
    let calls = flags.calls.clone();
    spindle_testkit::wait_for("the busy task to start its loop", || {
        calls.load(Ordering::SeqCst) > 1000
    });
    let (client, server) = std_tcp_pair();
    let echo = echo_thread(server);
    let talker = rt.spawn(move || -> io::Result<u32> {
        let mut s = TcpStream::from_std(client)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(BACKSTOP))?;
        for i in 0..ROUND_TRIPS {
            let request = u64::from(i).to_le_bytes();
            s.write_all(&request)?;
            let mut reply = [0u8; 8];
            s.read_exact(&mut reply)?;
            assert_eq!(reply, request, "the echo of round trip {i}");
        }
        Ok(ROUND_TRIPS)
    });
    let t = Instant::now();
    while !talker.is_finished() && t.elapsed() < STARVED_AFTER {
        thread::sleep(Duration::from_millis(5));
    }
    let completed = talker.is_finished();
    // Ended either way, so that a failure is reported, not hung on: the
    // busy task first (its socket still ready), then what fed it.
    flags.done.store(true, Ordering::SeqCst);
    let busy = busy.join().unwrap();
    flags.feeder_done.store(true, Ordering::SeqCst);
    feeder.join().unwrap();
    busy.expect("the busy task's calls");
    assert!(
        flags.calls.load(Ordering::SeqCst) > 1000,
        "the busy task never made its calls"
    );
    if completed {
        assert_eq!(
            talker.join().unwrap().expect("the round trips"),
            ROUND_TRIPS
        );
    }
    drop(echo);
    completed
}

/// A TCP reader whose peer writes without pause, reading 16 bytes at a
/// time (far slower than the peer writes, so its receive queue stays full
/// and no read meets `EAGAIN`), does not starve a talker on its worker.
#[test]
fn a_tcp_reader_that_never_waits_leaves_room_for_round_trips() {
    let flags = Flags::default();
    let (reader_side, feeder_side) = std_tcp_pair();
    let feeder = feed_without_pause(&flags, feeder_side);
    let f = flags.clone();
    let busy = move || -> io::Result<()> {
        let s = TcpStream::from_std(reader_side)?;
        s.set_read_timeout(Some(BACKSTOP))?;
        read_until_done(&f, s, &mut [0u8; 16], || {})
    };
    assert!(
        round_trips_beside(&flags, busy, feeder),
        "{ROUND_TRIPS} round trips beside a TCP reader whose data never runs out \
         did not complete within {STARVED_AFTER:?}: the reader starved them"
    );
}

/// A TCP writer whose peer drains without pause, writing 16 bytes at a
/// time (its send buffer never fills, so no write meets `EAGAIN`), does not
/// starve a talker on its worker.
#[test]
fn a_tcp_writer_that_never_waits_leaves_room_for_round_trips() {
    let flags = Flags::default();
    let (writer_side, mut drain_side) = std_tcp_pair();
    let f = flags.clone();
    let drain = thread::spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        drain_side
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        while !f.feeder_done.load(Ordering::SeqCst) {
            match drain_side.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return,
            }
        }
    });
    let f = flags.clone();
    let busy = move || -> io::Result<()> {
        let mut s = TcpStream::from_std(writer_side)?;
        s.set_write_timeout(Some(BACKSTOP))?;
        let buf = [1u8; 16];
        while !f.done.load(Ordering::Relaxed) {
            s.write_all(&buf)?;
            f.calls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    };
    assert!(
        round_trips_beside(&flags, busy, drain),
        "{ROUND_TRIPS} round trips beside a TCP writer whose buffer never fills \
         did not complete within {STARVED_AFTER:?}: the writer starved them"
    );
}

/// A UDP receiver whose peer sends without pause, and which works on each
/// datagram a little (so that the peer stays ahead and its queue stays
/// full), does not starve a talker on its worker.
#[test]
fn a_udp_receiver_that_never_waits_leaves_room_for_round_trips() {
    let flags = Flags::default();
    let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    ask_for_a_large_buffer(&receiver, libc::SO_RCVBUF);
    let to = receiver.local_addr().unwrap();
    let f = flags.clone();
    let feeder = thread::spawn(move || {
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let datagram = [3u8; 32];
        while !f.feeder_done.load(Ordering::SeqCst) {
            // A full receive queue drops datagrams, which is what keeps it
            // full; an error (ECONNREFUSED, ENOBUFS) is tried again.
            let _ = sender.send_to(&datagram, to);
        }
    });
    let f = flags.clone();
    let busy = move || -> io::Result<()> {
        let s = UdpSocket::from_std(receiver)?;
        s.set_read_timeout(Some(BACKSTOP))?;
        let mut buf = [0u8; 64];
        while !f.done.load(Ordering::Relaxed) {
            let n = s.recv(&mut buf)?;
            assert_eq!(n, 32);
            work_a_little();
            f.calls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    };
    assert!(
        round_trips_beside(&flags, busy, feeder),
        "{ROUND_TRIPS} round trips beside a UDP receiver whose datagrams never run \
         out did not complete within {STARVED_AFTER:?}: the receiver starved them"
    );
}

/// A Unix stream reader whose peer writes without pause, reading a byte at
/// a time and working on it a little (a Unix stream's queue is shorter
/// than a TCP one's: so that it stays full while the feeder waits for a
/// CPU), does not starve a talker on its worker.
#[test]
fn a_unix_reader_that_never_waits_leaves_room_for_round_trips() {
    let flags = Flags::default();
    let (reader_side, feeder_side) = std::os::unix::net::UnixStream::pair().unwrap();
    // A Unix stream's queue is bounded by its sender's buffer.
    ask_for_a_large_buffer(&feeder_side, libc::SO_SNDBUF);
    let feeder = feed_without_pause(&flags, feeder_side);
    let f = flags.clone();
    let busy = move || -> io::Result<()> {
        let s = UnixStream::from_std(reader_side)?;
        s.set_read_timeout(Some(BACKSTOP))?;
        read_until_done(&f, s, &mut [0u8; 1], work_a_little)
    };
    assert!(
        round_trips_beside(&flags, busy, feeder),
        "{ROUND_TRIPS} round trips beside a Unix reader whose data never runs out \
         did not complete within {STARVED_AFTER:?}: the reader starved them"
    );
}

/// A TCP loop of `peek` on data that was written once and is never read:
/// its socket is ready by construction, whatever the machine does (a
/// feeding thread kept off the CPU could let the tests above see `EAGAIN`
/// and pass without the budget; this one cannot).
#[test]
fn a_tcp_peek_loop_on_queued_data_leaves_room_for_round_trips() {
    let flags = Flags::default();
    let (peeked, mut writer) = std_tcp_pair();
    writer.write_all(b"never read").unwrap();
    let holder = hold_until_done(&flags, writer);
    let f = flags.clone();
    let busy = move || -> io::Result<()> {
        let s = TcpStream::from_std(peeked)?;
        s.set_read_timeout(Some(BACKSTOP))?;
        let mut buf = [0u8; 16];
        while !f.done.load(Ordering::Relaxed) {
            assert_eq!(s.peek(&mut buf)?, 10);
            f.calls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    };
    assert!(
        round_trips_beside(&flags, busy, holder),
        "{ROUND_TRIPS} round trips beside a TCP peek loop on queued data did not \
         complete within {STARVED_AFTER:?}: the loop starved them"
    );
}

/// A UDP loop of `peek_from` on one datagram that is never received: ready
/// by construction, as the TCP peek loop above.
#[test]
fn a_udp_peek_loop_on_a_queued_datagram_leaves_room_for_round_trips() {
    let flags = Flags::default();
    let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sender
        .send_to(&[5u8; 24], receiver.local_addr().unwrap())
        .unwrap();
    let holder = hold_until_done(&flags, sender);
    let f = flags.clone();
    let busy = move || -> io::Result<()> {
        let s = UdpSocket::from_std(receiver)?;
        s.set_read_timeout(Some(BACKSTOP))?;
        let mut buf = [0u8; 64];
        while !f.done.load(Ordering::Relaxed) {
            assert_eq!(s.peek_from(&mut buf)?.0, 24);
            f.calls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    };
    assert!(
        round_trips_beside(&flags, busy, holder),
        "{ROUND_TRIPS} round trips beside a UDP peek loop on a queued datagram did \
         not complete within {STARVED_AFTER:?}: the loop starved them"
    );
}

/// A thread that writes to `peer` (the other end of a busy task's
/// stream) without pause until the test ends, or the stream does.
fn feed_without_pause<W: Write + Send + 'static>(
    flags: &Flags,
    mut peer: W,
) -> thread::JoinHandle<()> {
    let f = flags.clone();
    thread::spawn(move || {
        let chunk = vec![7u8; 64 * 1024];
        while !f.feeder_done.load(Ordering::SeqCst) {
            if peer.write_all(&chunk).is_err() {
                return;
            }
        }
    })
}

/// A busy task's loop over a stream fed without pause: reads into `buf`
/// and calls `after_each` until the test raises `done`; EOF is an error.
fn read_until_done(
    f: &Flags,
    mut s: impl Read,
    buf: &mut [u8],
    after_each: impl Fn(),
) -> io::Result<()> {
    while !f.done.load(Ordering::Relaxed) {
        if s.read(buf)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        after_each();
        f.calls.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// A thread that only holds `peer` (the other end of a busy task's socket)
/// open until the test ends: a socket whose data stays needs no feeding.
fn hold_until_done<P: Send + 'static>(flags: &Flags, peer: P) -> thread::JoinHandle<()> {
    let f = flags.clone();
    thread::spawn(move || {
        while !f.feeder_done.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(5));
        }
        drop(peer);
    })
}

/// A loop of `io::wait_fd` on an fd that is always ready (a socket with
/// unread data) does not starve a talker on its worker.
#[test]
fn a_wait_fd_loop_on_a_ready_fd_leaves_room_for_round_trips() {
    let flags = Flags::default();
    let (ready, mut writer) = std_tcp_pair();
    writer.write_all(b"never read").unwrap();
    let holder = hold_until_done(&flags, writer);
    let f = flags.clone();
    let busy = move || -> io::Result<()> {
        while !f.done.load(Ordering::Relaxed) {
            spindle::io::wait_fd(ready.as_fd(), spindle::io::Interest::Readable, None)?;
            f.calls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    };
    assert!(
        round_trips_beside(&flags, busy, holder),
        "{ROUND_TRIPS} round trips beside a loop of wait_fd on a ready fd did not \
         complete within {STARVED_AFTER:?}: the loop starved them"
    );
}

/// Some work on what a busy task read: 20 µs, so that its socket's queue,
/// full when the feeding thread waits for a CPU, lasts some milliseconds
/// (a UDP receive queue of the default size holds a few hundred small
/// datagrams). With the budget, 128 calls then hold the worker for a few
/// ms, and 100 round trips take well under a second.
fn work_a_little() {
    let t = Instant::now();
    while t.elapsed() < Duration::from_micros(20) {
        std::hint::spin_loop();
    }
}

/// Asks for a socket buffer (`SO_RCVBUF`, `SO_SNDBUF`) of 4 MiB, which the
/// kernel caps at its limit: a longer queue for a busy task, so that it
/// stays full while its feeding thread waits for a CPU. Best effort.
fn ask_for_a_large_buffer(s: &impl AsRawFd, option: libc::c_int) {
    let bytes: libc::c_int = 4 << 20;
    // SAFETY: the fd is open for the borrow; the option's value is a
    // `c_int` of the size passed.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}
