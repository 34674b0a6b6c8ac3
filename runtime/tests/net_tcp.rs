//! TCP through `spindle::net`: echoes of every size, a blocked read that
//! holds only its task, every way a blocked wait ends (data, a deadline
//! scope, a socket timeout, `interrupt`, `stop`), full duplex across tasks,
//! half close, refused connections, a stream handed between tasks, workers
//! and runtimes, and the same calls on plain threads. Time bounds are wide:
//! these assert what happens and in what order, never how fast.

mod common;
mod net_common;

use common::{rt, wait_for};
use net_common::{
    a_task_runs_within, assert_wait_error, echo, echo_server, expect_err,
    one_byte_from_three_clients, signalled, tcp_pair, BACKSTOP, LOOPBACK, PROMPTLY, SETTLE,
};
use spindle::net::{TcpListener, TcpStream};
use spindle::{SleepError, WaitError};
use spindle_testkit::pattern;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writes chunks to `s`, whose peer does not read, until a write fails.
/// Returns that error, the bytes that went in before it, and how long the
/// failing write took. Bounded: a socket that takes 256 MiB is a failure.
fn write_until_error(s: &TcpStream) -> (io::Error, usize, Duration) {
    let chunk = vec![0x5au8; 64 * 1024];
    let mut s = s;
    let mut sent = 0;
    for _ in 0..4096 {
        let t = Instant::now();
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) => return (e, sent, t.elapsed()),
        }
    }
    panic!("a socket whose peer never reads took {sent} bytes");
}

/// An address nothing listens on: a port that was just bound and let go.
fn refusing_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind(LOOPBACK).unwrap();
    l.local_addr().unwrap()
}

/// Guards the data path: every size comes back through an echo unchanged, in order, and then EOF.
#[test]
fn echo_of_every_size_comes_back_unchanged() {
    let rt = rt(2);
    rt.block_on(|| {
        for size in [1usize, 100, 4 * 1024, 64 * 1024, 1024 * 1024] {
            let listener = TcpListener::bind(LOOPBACK).unwrap();
            let addr = listener.local_addr().unwrap();
            let server = spindle::spawn(move || echo_server(listener, 1));
            let client = Arc::new(TcpStream::connect(addr).unwrap());
            client.set_read_timeout(Some(BACKSTOP)).unwrap();
            let data = Arc::new(pattern(size as u64, size));
            // A writer task of its own: a large echo flows both ways at once.
            let writer = {
                let (client, data) = (client.clone(), data.clone());
                spindle::spawn(move || {
                    (&*client).write_all(&data).unwrap();
                    client.shutdown(Shutdown::Write).unwrap();
                })
            };
            let mut back = vec![0u8; size];
            (&*client).read_exact(&mut back).unwrap();
            writer.join().unwrap();
            assert!(back == *data, "{size} bytes came back changed");
            let n = (&*client).read(&mut [0u8; 16]).unwrap();
            assert_eq!(n, 0, "{size} bytes: more than the echo came back");
            assert_eq!(server.join().unwrap(), size as u64);
        }
    });
}

/// Guards that a task blocked in `read` leaves its only worker to the other tasks.
#[test]
fn a_blocked_read_does_not_hold_the_worker() {
    let rt = rt(1);
    let (client, server) = tcp_pair();
    server.set_read_timeout(Some(BACKSTOP)).unwrap();
    let reading = Arc::new(AtomicBool::new(false));
    let r = reading.clone();
    let reader = rt.spawn(move || {
        let mut buf = [0u8; 16];
        r.store(true, Ordering::SeqCst);
        let n = (&server).read(&mut buf)?;
        Ok::<_, io::Error>(buf[..n].to_vec())
    });
    wait_for("the reader to start", || reading.load(Ordering::SeqCst));
    std::thread::sleep(SETTLE);
    // Watched from this plain thread, so that a read that holds the worker
    // fails the test instead of hanging it: the write below ends it.
    let counter = rt.spawn(|| {
        let mut n = 0;
        for _ in 0..20 {
            spindle::sleep(Duration::from_millis(1)).unwrap();
            n += 1;
        }
        n
    });
    let t = Instant::now();
    while !counter.is_finished() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let others_ran = counter.is_finished();
    let reader_waited = !reader.is_finished();
    (&client).write_all(b"hello").unwrap();
    assert!(others_ran, "no other task ran while one waited in read");
    assert!(reader_waited, "the read returned before any data came");
    assert_eq!(counter.join().unwrap(), 20);
    assert_eq!(reader.join().unwrap().unwrap(), b"hello");
    assert!(a_task_runs_within(&rt, Duration::from_secs(10)));
}

/// Guards deadline scopes on sockets: a read fails with TimedOut (DeadlineExceeded inside) after the deadline, and the stream still works.
#[test]
fn a_read_in_a_deadline_scope_times_out_after_the_deadline() {
    let rt = rt(1);
    rt.block_on(|| {
        let (client, server) = tcp_pair();
        server.set_read_timeout(Some(BACKSTOP)).unwrap();
        let limit = Duration::from_millis(50);
        let t = Instant::now();
        let r = spindle::with_deadline(t + limit, || (&server).read(&mut [0u8; 8]));
        let took = t.elapsed();
        let e = expect_err(r, "a read with no data in a deadline scope");
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::DeadlineExceeded);
        assert!(
            took >= limit,
            "ended after {took:?}, before its {limit:?} deadline"
        );
        assert!(took < PROMPTLY, "ended after {took:?}");
        // A deadline that has already passed fails the wait at once.
        let t = Instant::now();
        let r = spindle::with_deadline(Instant::now(), || (&server).read(&mut [0u8; 8]));
        let e = expect_err(r, "a read in an expired scope");
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::DeadlineExceeded);
        assert!(t.elapsed() < PROMPTLY);
        // Out of the scope, the stream reads what comes.
        (&client).write_all(b"ok").unwrap();
        let mut buf = [0u8; 2];
        (&server).read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ok");
    });
}

/// Guards that accept and a write to a full socket honour a deadline scope as a read does.
#[test]
fn accept_and_write_honour_a_deadline_scope() {
    let rt = rt(1);
    rt.block_on(|| {
        let listener = TcpListener::bind(LOOPBACK).unwrap();
        let limit = Duration::from_millis(50);
        let t = Instant::now();
        let r = spindle::with_deadline(t + limit, || listener.accept().map(|(_, peer)| peer));
        let took = t.elapsed();
        let e = expect_err(r, "an accept with nobody connecting");
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::DeadlineExceeded);
        assert!(took >= limit, "ended after {took:?}, before {limit:?}");
        assert!(took < PROMPTLY, "ended after {took:?}");

        let (client, _server) = tcp_pair();
        client.set_write_timeout(Some(BACKSTOP)).unwrap();
        let t = Instant::now();
        let (e, sent, _) = spindle::with_deadline(t + limit, || write_until_error(&client));
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::DeadlineExceeded);
        assert!(sent > 0, "no byte went in before the socket filled");
        let took = t.elapsed();
        assert!(took >= limit, "ended after {took:?}, before {limit:?}");
        assert!(took < PROMPTLY, "ended after {took:?}");
    });
}

/// Guards socket timeouts: a read and a write to a full socket fail with TimedOut (WaitError::TimedOut inside) after the timeout.
#[test]
fn socket_timeouts_end_reads_and_writes() {
    let rt = rt(1);
    rt.block_on(|| {
        let (client, server) = tcp_pair();
        let limit = Duration::from_millis(50);
        assert_eq!(server.read_timeout().unwrap(), None);
        server.set_read_timeout(Some(limit)).unwrap();
        assert_eq!(server.read_timeout().unwrap(), Some(limit));
        // Each read gets a whole timeout of its own.
        for _ in 0..2 {
            let t = Instant::now();
            let e = expect_err((&server).read(&mut [0u8; 8]), "a read with no data");
            let took = t.elapsed();
            assert_wait_error(&e, ErrorKind::TimedOut, WaitError::TimedOut);
            assert!(
                took >= limit,
                "ended after {took:?}, before its {limit:?} timeout"
            );
            assert!(took < PROMPTLY, "ended after {took:?}");
        }
        // The timeout bounds waits only: data that is there is read.
        (&client).write_all(b"x").unwrap();
        assert_eq!((&server).read(&mut [0u8; 8]).unwrap(), 1);

        assert_eq!(client.write_timeout().unwrap(), None);
        client.set_write_timeout(Some(limit)).unwrap();
        assert_eq!(client.write_timeout().unwrap(), Some(limit));
        let (e, sent, took) = write_until_error(&client);
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::TimedOut);
        assert!(sent > 0, "no byte went in before the socket filled");
        assert!(
            took >= limit,
            "ended after {took:?}, before its {limit:?} timeout"
        );
        assert!(took < PROMPTLY, "ended after {took:?}");
        // Timeouts can be taken off again.
        server.set_read_timeout(None).unwrap();
        assert_eq!(server.read_timeout().unwrap(), None);
    });
}

/// Guards interrupts on sockets: `interrupt` ends a blocked read, `read_exact` and `write_all` with Interrupted (no retry).
#[test]
fn an_interrupt_ends_read_read_exact_and_write_all() {
    let rt = rt(2);
    let (client, server) = tcp_pair();
    let (client, server) = (Arc::new(client), Arc::new(server));
    server.set_read_timeout(Some(BACKSTOP)).unwrap();
    client.set_write_timeout(Some(BACKSTOP)).unwrap();

    let s = server.clone();
    let (r, took) = signalled(&rt, spindle::interrupt, move || (&*s).read(&mut [0u8; 8]));
    let e = expect_err(r, "an interrupted read");
    assert_wait_error(&e, ErrorKind::Interrupted, WaitError::Interrupted);
    assert!(took < PROMPTLY + SETTLE, "ended after {took:?}");

    // read_exact, with part of what it wants already in: std's would retry.
    (&*client).write_all(b"part").unwrap();
    let s = server.clone();
    let (r, took) = signalled(&rt, spindle::interrupt, move || {
        (&*s).read_exact(&mut [0u8; 16])
    });
    let e = expect_err(r, "an interrupted read_exact");
    assert_wait_error(&e, ErrorKind::Interrupted, WaitError::Interrupted);
    assert!(took < PROMPTLY + SETTLE, "ended after {took:?}");

    // write_all of more than a socket takes, the peer not reading.
    let c = client.clone();
    let (r, took) = signalled(&rt, spindle::interrupt, move || {
        (&*c).write_all(&vec![0u8; 64 << 20])
    });
    let e = expect_err(r, "an interrupted write_all");
    assert_wait_error(&e, ErrorKind::Interrupted, WaitError::Interrupted);
    assert!(took < PROMPTLY + SETTLE, "ended after {took:?}");

    // The streams still work: the other direction was never used.
    (&*server).write_all(b"after").unwrap();
    let mut buf = [0u8; 5];
    (&*client).read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"after");
}

/// Guards `stop` on sockets: it ends a blocked read with Stopped (kind Other), and every later wait of the task fails at once.
#[test]
fn a_stop_ends_the_read_and_every_later_wait_at_once() {
    let rt = rt(2);
    let (client, server) = tcp_pair();
    server.set_read_timeout(Some(BACKSTOP)).unwrap();
    let listener = TcpListener::bind(LOOPBACK).unwrap();
    let ((first, second, took, accept, sleep), _) = signalled(&rt, spindle::stop, move || {
        let first = (&server).read(&mut [0u8; 8]);
        let t = Instant::now();
        let second = (&server).read(&mut [0u8; 8]);
        let took = t.elapsed();
        let accept = listener.accept().map(|(_, peer)| peer);
        (first, second, took, accept, spindle::sleep(BACKSTOP))
    });
    let e = expect_err(first, "a stopped read");
    assert_wait_error(&e, ErrorKind::Other, WaitError::Stopped);
    let e = expect_err(second, "a read after the stop");
    assert_wait_error(&e, ErrorKind::Other, WaitError::Stopped);
    assert!(took < PROMPTLY, "the read after the stop took {took:?}");
    let e = expect_err(accept, "an accept after the stop");
    assert_wait_error(&e, ErrorKind::Other, WaitError::Stopped);
    assert_eq!(sleep, Err(SleepError::Stopped));
    drop(client);
}

/// Guards full duplex: one task writes while another reads the same stream, both ways at once, through `&TcpStream` and through `try_clone`.
#[test]
fn a_stream_is_full_duplex_across_tasks() {
    const LEN: usize = 4 << 20;
    let rt = rt(2);
    rt.block_on(|| {
        let (a, b) = tcp_pair();
        let b_reader = b.try_clone().unwrap();
        assert_eq!(b_reader.local_addr().unwrap(), b.local_addr().unwrap());
        for s in [&a, &b, &b_reader] {
            s.set_read_timeout(Some(BACKSTOP)).unwrap();
            s.set_write_timeout(Some(BACKSTOP)).unwrap();
        }
        let (a, b) = (Arc::new(a), Arc::new(b));
        let to_b = Arc::new(pattern(1, LEN));
        let to_a = Arc::new(pattern(2, LEN));
        let write =
            |s: Arc<TcpStream>, data: Arc<Vec<u8>>| spindle::spawn(move || (&*s).write_all(&data));
        let a_writes = write(a.clone(), to_b.clone());
        let b_writes = write(b.clone(), to_a.clone());
        let a_reads = {
            let a = a.clone();
            spindle::spawn(move || {
                let mut got = vec![0u8; LEN];
                (&*a).read_exact(&mut got).map(|()| got)
            })
        };
        let b_reads = spindle::spawn(move || {
            let mut got = vec![0u8; LEN];
            let mut r = b_reader;
            r.read_exact(&mut got).map(|()| got)
        });
        a_writes.join().unwrap().unwrap();
        b_writes.join().unwrap().unwrap();
        assert!(
            a_reads.join().unwrap().unwrap() == *to_a,
            "a got b's bytes changed"
        );
        assert!(
            b_reads.join().unwrap().unwrap() == *to_b,
            "b got a's bytes changed"
        );
    });
}

/// Guards half close: shutdown(Write) wakes the peer's blocked read with EOF, and the other direction still works.
#[test]
fn shutdown_write_gives_the_peer_eof() {
    let rt = rt(2);
    rt.block_on(|| {
        let (client, server) = tcp_pair();
        let server = Arc::new(server);
        server.set_read_timeout(Some(BACKSTOP)).unwrap();
        // A read already blocked when the shutdown comes.
        let s = server.clone();
        let reader = spindle::spawn(move || (&*s).read(&mut [0u8; 8]));
        spindle::sleep(SETTLE).unwrap();
        assert!(!reader.is_finished(), "a read returned with nothing sent");
        client.shutdown(Shutdown::Write).unwrap();
        assert_eq!(reader.join().unwrap().unwrap(), 0, "no EOF after shutdown");
        assert_eq!(
            (&*server).read(&mut [0u8; 8]).unwrap(),
            0,
            "EOF is for good"
        );
        // Half closed: the server still writes and the client reads it all.
        (&*server).write_all(b"reply").unwrap();
        server.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        (&client).read_to_end(&mut got).unwrap();
        assert_eq!(got, b"reply");
    });
}

/// Guards that data written before a shutdown arrives before the EOF.
#[test]
fn data_before_shutdown_arrives_before_eof() {
    let rt = rt(1);
    rt.block_on(|| {
        let (client, server) = tcp_pair();
        server.set_read_timeout(Some(BACKSTOP)).unwrap();
        (&client).write_all(b"last words").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        (&server).read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last words");
    });
}

/// Guards refused connections: connect and connect_timeout to a closed port fail promptly with ConnectionRefused, in a task and on a plain thread.
#[test]
fn a_refused_connection_fails_promptly() {
    let addr = refusing_addr();
    let check = move || {
        let t = Instant::now();
        let r = TcpStream::connect(addr).map(drop);
        let e = expect_err(r, "a connect to a closed port");
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e:?}");
        let r = TcpStream::connect_timeout(&addr, BACKSTOP).map(drop);
        let e = expect_err(r, "a connect_timeout to a closed port");
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e:?}");
        assert!(t.elapsed() < PROMPTLY, "took {:?}", t.elapsed());
    };
    rt(1).block_on(check);
    check();
}

/// Guards connect_timeout's success path and that connect tries each address in turn, as std's does.
#[test]
fn connect_timeout_and_address_lists() {
    let rt = rt(1);
    rt.block_on(|| {
        let listener = TcpListener::bind(LOOPBACK).unwrap();
        let addr = listener.local_addr().unwrap();
        let c = TcpStream::connect_timeout(&addr, BACKSTOP).unwrap();
        let (s, peer) = listener.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        assert_eq!(c.peer_addr().unwrap(), addr);
        drop((c, s));
        // The first address refuses, the second listens.
        let list = [refusing_addr(), addr];
        let c = TcpStream::connect(&list[..]).unwrap();
        assert_eq!(c.peer_addr().unwrap(), addr);
        let (_s, peer) = listener.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
    });
}

/// Guards the plain accessors: addresses, nodelay, take_error, and `incoming`.
#[test]
fn addresses_options_and_incoming() {
    let rt = rt(1);
    rt.block_on(|| {
        let (c, s) = tcp_pair();
        assert_eq!(c.peer_addr().unwrap(), s.local_addr().unwrap());
        assert_eq!(s.peer_addr().unwrap(), c.local_addr().unwrap());
        assert!(c.local_addr().unwrap().ip().is_loopback());
        c.set_nodelay(true).unwrap();
        assert!(c.nodelay().unwrap());
        c.set_nodelay(false).unwrap();
        assert!(!c.nodelay().unwrap());
        assert!(c.take_error().unwrap().is_none());

        let listener = TcpListener::bind(LOOPBACK).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(addr.ip().is_loopback() && addr.port() != 0);
        let seen = one_byte_from_three_clients(
            move || TcpStream::connect(addr),
            listener.incoming(),
            |s| s.set_read_timeout(Some(BACKSTOP)),
        );
        assert_eq!(seen, [0, 1, 2]);
    });
}

/// Guards from_std: std's listener and stream, taken over, wait as tasks do and leave the worker free.
#[test]
fn from_std_sockets_block_only_the_task() {
    let rt = rt(1);
    let std_listener = std::net::TcpListener::bind(LOOPBACK).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let listener = TcpListener::from_std(std_listener).unwrap();
    assert_eq!(listener.local_addr().unwrap(), addr);
    let client = TcpStream::from_std(std::net::TcpStream::connect(addr).unwrap()).unwrap();
    let server = rt.spawn(move || {
        let (s, _) = listener.accept()?;
        s.set_read_timeout(Some(BACKSTOP))?;
        let mut buf = [0u8; 5];
        (&s).read_exact(&mut buf)?;
        Ok::<_, io::Error>(buf)
    });
    std::thread::sleep(SETTLE);
    // Watched from here: a read that held the worker fails the test, and the
    // write below ends it.
    let others_ran = a_task_runs_within(&rt, Duration::from_secs(10));
    (&client).write_all(b"taken").unwrap();
    assert!(others_ran, "a read on a from_std stream held the worker");
    assert_eq!(&server.join().unwrap().unwrap(), b"taken");
}

/// Guards a stream that moves: waited on by one task, then by others on either worker, then by a plain thread.
#[test]
fn a_stream_moves_between_tasks_workers_and_threads() {
    let rt = rt(2);
    let (client, server) = tcp_pair();
    let client = Arc::new(client);
    server.set_read_timeout(Some(BACKSTOP)).unwrap();
    let mut server = Some(server);
    for round in 0..20u8 {
        let s = server.take().unwrap();
        let reader = rt.spawn(move || {
            let mut b = [0u8; 1];
            let r = (&s).read_exact(&mut b).map(|()| b[0]);
            (r, s)
        });
        // Sometimes the data comes first, mostly the reader waits for it.
        if round % 4 != 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        (&*client).write_all(&[round]).unwrap();
        let (r, s) = reader.join().unwrap();
        assert_eq!(r.unwrap(), round);
        server = Some(s);
    }
    // A plain thread blocks in the read, as std's would.
    let s = server.take().unwrap();
    let c = client.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(SETTLE);
        (&*c).write_all(b"!").unwrap();
    });
    let mut b = [0u8; 1];
    (&s).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"!");
    writer.join().unwrap();
}

/// Guards a stream that outlives its runtime: used by a task of one runtime, then by a task of another.
#[test]
fn a_stream_outlives_the_runtime_it_was_used_in() {
    let (client, server) = tcp_pair();
    server.set_read_timeout(Some(BACKSTOP)).unwrap();
    let client = Arc::new(client);
    let mut server = Some(server);
    for _ in 0..2 {
        let rt = rt(1);
        let s = server.take().unwrap();
        let reader = rt.spawn(move || {
            let mut b = [0u8; 2];
            let r = (&s).read_exact(&mut b).map(|()| b);
            (r, s)
        });
        std::thread::sleep(SETTLE);
        (&*client).write_all(b"hi").unwrap();
        let (r, s) = reader.join().unwrap();
        assert_eq!(&r.unwrap(), b"hi");
        server = Some(s);
        rt.shutdown();
    }
}

/// Guards plain threads: spindle's sockets block the thread as std's do (accept, connect, echo, a read timeout).
#[test]
fn on_plain_threads_sockets_block_like_std() {
    let listener = TcpListener::bind(LOOPBACK).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        echo(s).unwrap()
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"plain").unwrap();
    let mut back = [0u8; 5];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"plain");
    let limit = Duration::from_millis(50);
    c.set_read_timeout(Some(limit)).unwrap();
    let t = Instant::now();
    let e = expect_err(
        c.read(&mut [0u8; 8]),
        "a read with no data, on a plain thread",
    );
    let took = t.elapsed();
    // std says WouldBlock or TimedOut, by platform.
    assert!(
        matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock),
        "{e:?}"
    );
    assert!(took >= limit, "ended after {took:?}, before {limit:?}");
    assert!(took < PROMPTLY, "ended after {took:?}");
    c.shutdown(Shutdown::Write).unwrap();
    assert_eq!(c.read(&mut [0u8; 8]).unwrap(), 0);
    assert_eq!(server.join().unwrap(), 5);
}

/// Guards a peer's reset: a task blocked in `read` gets std's `ConnectionReset`.
#[test]
fn a_peer_reset_gives_connection_reset() {
    let rt = rt(1);
    let (client, server) = tcp_pair();
    let reader = rt.spawn(move || {
        server.set_read_timeout(Some(BACKSTOP)).unwrap();
        let mut b = [0u8; 8];
        (&server).read(&mut b)
    });
    std::thread::sleep(SETTLE);
    // SO_LINGER with a zero timeout: the close sends a RST, not a FIN.
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket fd and a `linger` of the size given.
    let rc = unsafe {
        libc::setsockopt(
            client.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "set SO_LINGER");
    drop(client);
    let r = reader.join().unwrap();
    assert_eq!(
        r.map_err(|e| e.kind()).err(),
        Some(ErrorKind::ConnectionReset),
        "the read ends with std's error for a reset"
    );
}

/// Guards the end of a stream that arrives with its last data in one event:
/// a reader that read short just before must still see the EOF (no "drained"
/// shortcut past a hang-up).
#[test]
fn data_and_eof_in_one_event_end_read_to_end() {
    let rt = rt(1);
    rt.block_on(|| {
        for round in 0..50 {
            let (client, server) = tcp_pair();
            server.set_read_timeout(Some(BACKSTOP)).unwrap();
            let reader = spindle::spawn(move || {
                let mut first = [0u8; 1];
                (&server).read_exact(&mut first)?;
                let mut rest = Vec::new();
                (&server).read_to_end(&mut rest)?;
                Ok::<_, io::Error>((first, rest))
            });
            spindle::yield_now();
            (&client).write_all(b"a").unwrap();
            spindle::yield_now();
            (&client).write_all(b"bcd").unwrap();
            drop(client);
            let (first, rest) = reader
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!((&first[..], &rest[..]), (&b"a"[..], &b"bcd"[..]));
        }
    });
}

/// Guards a task of one runtime waiting on a stream registered in another
/// runtime's poller when that runtime shuts down: the wait moves to the
/// waiter's own worker and still sees the data.
#[test]
fn a_wait_survives_the_shutdown_of_the_runtime_that_registered_the_fd() {
    let (client, server) = tcp_pair();
    server.set_read_timeout(Some(BACKSTOP)).unwrap();
    let server = Arc::new(server);
    let first = rt(1);
    let s = server.clone();
    // Registered in `first`'s poller by a read that times out.
    first
        .spawn(move || {
            s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
            let e = (&*s).read(&mut [0u8; 1]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut);
            s.set_read_timeout(Some(BACKSTOP)).unwrap();
        })
        .join()
        .unwrap();
    let second = rt(1);
    let s = server.clone();
    let reader = second.spawn(move || {
        let mut b = [0u8; 2];
        (&*s).read_exact(&mut b).map(|()| b)
    });
    std::thread::sleep(SETTLE);
    first.shutdown();
    std::thread::sleep(SETTLE);
    (&client).write_all(b"hi").unwrap();
    let t = Instant::now();
    let got = reader.join().unwrap();
    assert_eq!(got.unwrap(), *b"hi");
    assert!(
        t.elapsed() < BACKSTOP / 2,
        "woken by the data, not the backstop"
    );
}
