//! The rest of `spindle::net`: names resolved off the worker, UDP, Unix
//! sockets, and bad input (a zero timeout, a name that does not resolve).
//! Only loopback addresses and temp-dir paths; time bounds are wide.

mod common;
mod net_common;

use common::rt;
use net_common::{
    assert_wait_error, echo, echo_server, expect_err, one_byte_from_three_clients, Ticker,
    BACKSTOP, LOOPBACK, PROMPTLY, SETTLE,
};
use spindle::net::{lookup_host, TcpListener, TcpStream, UdpSocket, UnixListener, UnixStream};
use spindle::WaitError;
use spindle_testkit::pattern;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A listener on the first of "localhost"'s addresses that takes one, so
/// that a connect by name finds it at the first address it tries.
fn bind_localhost() -> TcpListener {
    let ips = std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 0u16))
        .expect("resolve localhost")
        .map(|a| a.ip());
    for ip in ips {
        if let Ok(l) = TcpListener::bind(SocketAddr::new(ip, 0)) {
            return l;
        }
    }
    panic!("no address of localhost takes a listener");
}

/// Writes `msg` to `s`, reads as many bytes back, and checks them.
#[track_caller]
fn round_trip(s: &TcpStream, msg: &[u8]) {
    let mut s = s;
    s.write_all(msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, msg);
}

/// Guards name resolution off the worker: connect by "localhost" (each form of address) works on a 1-worker runtime whose other task keeps running.
#[test]
fn connect_by_name_works_on_one_worker() {
    let rt = rt(1);
    rt.block_on(|| {
        let listener = bind_localhost();
        let port = listener.local_addr().unwrap().port();
        let server = spindle::spawn(move || echo_server(listener, 4));
        let ticker = Ticker::start();
        let before = ticker.ticks();
        let t = Instant::now();
        let conns = [
            TcpStream::connect(("localhost", port)).unwrap(),
            TcpStream::connect(format!("localhost:{port}")).unwrap(),
            TcpStream::connect(format!("localhost:{port}").as_str()).unwrap(),
            TcpStream::connect((String::from("localhost"), port)).unwrap(),
        ];
        let took = t.elapsed();
        // A resolution that held the only worker would have stopped the
        // ticker; one long enough to show it must have let it tick.
        if took > Duration::from_millis(200) {
            assert!(
                ticker.ticks() > before,
                "the ticker stood still for {took:?}"
            );
        }
        for (i, c) in conns.iter().enumerate() {
            c.set_read_timeout(Some(BACKSTOP)).unwrap();
            assert_eq!(c.peer_addr().unwrap().port(), port);
            round_trip(c, &pattern(i as u64, 100));
        }
        drop(conns);
        assert_eq!(server.join().unwrap(), 400);
        assert!(ticker.finish() > 0, "the other task never ran");
    });
}

/// Guards lookup_host: "localhost:80" gives loopback addresses with port 80, and literals give themselves, in a task and on a plain thread.
#[test]
fn lookup_host_resolves_localhost_and_literals() {
    let check = || {
        let addrs: Vec<SocketAddr> = lookup_host("localhost:80").unwrap().collect();
        assert!(!addrs.is_empty(), "localhost resolved to nothing");
        assert!(
            addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 80),
            "{addrs:?}"
        );
        let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, 8080));
        assert_eq!(
            lookup_host("127.0.0.1:8080").unwrap().collect::<Vec<_>>(),
            [v4]
        );
        assert_eq!(lookup_host(v4).unwrap().collect::<Vec<_>>(), [v4]);
        assert_eq!(
            lookup_host((Ipv4Addr::LOCALHOST, 8080))
                .unwrap()
                .collect::<Vec<_>>(),
            [v4]
        );
        assert_eq!(
            lookup_host((IpAddr::V4(Ipv4Addr::LOCALHOST), 8080))
                .unwrap()
                .collect::<Vec<_>>(),
            [v4]
        );
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, 9));
        assert_eq!(lookup_host("[::1]:9").unwrap().collect::<Vec<_>>(), [v6]);
        assert_eq!(lookup_host(("::1", 9)).unwrap().collect::<Vec<_>>(), [v6]);
    };
    check();
    rt(1).block_on(check);
}

/// Guards UDP: send_to/recv_from between two sockets (the receiver waiting first), connected send/recv, and accessors.
#[test]
fn udp_datagrams_go_both_ways() {
    let rt = rt(2);
    rt.block_on(|| {
        let a = UdpSocket::bind(LOOPBACK).unwrap();
        let b = Arc::new(UdpSocket::bind(LOOPBACK).unwrap());
        let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        b.set_read_timeout(Some(BACKSTOP)).unwrap();
        let receiver = {
            let b = b.clone();
            spindle::spawn(move || {
                let mut buf = [0u8; 64];
                let (n, from) = b.recv_from(&mut buf).unwrap();
                (buf[..n].to_vec(), from)
            })
        };
        spindle::sleep(SETTLE).unwrap();
        assert!(
            !receiver.is_finished(),
            "recv_from returned with nothing sent"
        );
        assert_eq!(a.send_to(b"datagram", b_addr).unwrap(), 8);
        let (got, from) = receiver.join().unwrap();
        assert_eq!(got, b"datagram");
        assert_eq!(from, a_addr);

        a.connect(b_addr).unwrap();
        b.connect(a_addr).unwrap();
        assert_eq!(a.peer_addr().unwrap(), b_addr);
        assert_eq!(b.peer_addr().unwrap(), a_addr);
        a.set_read_timeout(Some(BACKSTOP)).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(a.send(b"one").unwrap(), 3);
        let n = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"one");
        assert_eq!(b.send(b"two").unwrap(), 3);
        let n = a.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"two");
        // Many datagrams, each whole and in order (loopback loses none
        // when the receiver keeps up).
        for i in 0..100u8 {
            assert_eq!(a.send(&[i; 10]).unwrap(), 10);
            let n = b.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 10]);
        }
    });
}

/// Guards UDP timeouts: recv under a read timeout fails with TimedOut after it; under a deadline scope, TimedOut with DeadlineExceeded inside.
#[test]
fn udp_recv_times_out() {
    let rt = rt(1);
    rt.block_on(|| {
        let s = UdpSocket::bind(LOOPBACK).unwrap();
        let limit = Duration::from_millis(50);
        assert_eq!(s.read_timeout().unwrap(), None);
        s.set_read_timeout(Some(limit)).unwrap();
        assert_eq!(s.read_timeout().unwrap(), Some(limit));
        let mut buf = [0u8; 16];
        let t = Instant::now();
        let e = expect_err(s.recv_from(&mut buf), "a recv_from with nothing sent");
        let took = t.elapsed();
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::TimedOut);
        assert!(took >= limit, "ended after {took:?}, before {limit:?}");
        assert!(took < PROMPTLY, "ended after {took:?}");

        s.set_read_timeout(Some(BACKSTOP)).unwrap();
        let t = Instant::now();
        let r = spindle::with_deadline(t + limit, || s.recv_from(&mut buf));
        let took = t.elapsed();
        let e = expect_err(r, "a recv_from in a deadline scope");
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::DeadlineExceeded);
        assert!(took >= limit, "ended after {took:?}, before {limit:?}");
        assert!(took < PROMPTLY, "ended after {took:?}");

        s.set_write_timeout(Some(limit)).unwrap();
        assert_eq!(s.write_timeout().unwrap(), Some(limit));
    });
}

/// A socket path in the temp dir, unique to this process and `name`;
/// removed again when dropped.
struct SocketPath(PathBuf);

impl SocketPath {
    fn new(name: &str) -> Self {
        let file = format!("spindle-test-{}-{name}.sock", std::process::id());
        let path = std::env::temp_dir().join(file);
        let _ = std::fs::remove_file(&path);
        SocketPath(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SocketPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Guards Unix listeners: one bound in the temp dir serves an echo, with its path as local_addr.
#[test]
fn a_unix_listener_serves_an_echo() {
    const LEN: usize = 256 * 1024;
    let path = SocketPath::new("echo");
    let rt = rt(2);
    rt.block_on(|| {
        let listener = UnixListener::bind(path.path()).unwrap();
        let local = listener.local_addr().unwrap();
        assert_eq!(local.as_pathname(), Some(path.path()));
        let server = spindle::spawn(move || {
            let (s, _peer) = listener.accept().unwrap();
            echo(s).unwrap()
        });
        let client = Arc::new(UnixStream::connect(path.path()).unwrap());
        client.set_read_timeout(Some(BACKSTOP)).unwrap();
        let data = Arc::new(pattern(7, LEN));
        let writer = {
            let (client, data) = (client.clone(), data.clone());
            spindle::spawn(move || {
                (&*client).write_all(&data).unwrap();
                client.shutdown(Shutdown::Write).unwrap();
            })
        };
        let mut back = vec![0u8; LEN];
        (&*client).read_exact(&mut back).unwrap();
        writer.join().unwrap();
        assert!(back == *data, "the echo came back changed");
        assert_eq!((&*client).read(&mut [0u8; 8]).unwrap(), 0);
        assert_eq!(server.join().unwrap(), LEN as u64);
    });
}

/// Guards Unix incoming(): it yields each connection in turn.
#[test]
fn unix_incoming_yields_connections() {
    let path = SocketPath::new("incoming");
    let rt = rt(1);
    rt.block_on(|| {
        let listener = UnixListener::bind(path.path()).unwrap();
        let p = path.path().to_path_buf();
        let seen = one_byte_from_three_clients(
            move || UnixStream::connect(p.as_path()),
            listener.incoming(),
            |s| s.set_read_timeout(Some(BACKSTOP)),
        );
        assert_eq!(seen, [0, 1, 2]);
    });
}

/// Guards UnixStream::pair: a blocked reader is woken by data and then by shutdown(Write); a read timeout ends a read.
#[test]
fn a_unix_pair_reads_writes_shuts_down_and_times_out() {
    let rt = rt(1);
    rt.block_on(|| {
        let (a, b) = UnixStream::pair().unwrap();
        let b = Arc::new(b);
        b.set_read_timeout(Some(BACKSTOP)).unwrap();
        let reader = {
            let b = b.clone();
            spindle::spawn(move || {
                let mut got = Vec::new();
                (&*b).read_to_end(&mut got).map(|_| got)
            })
        };
        spindle::sleep(SETTLE).unwrap();
        assert!(
            !reader.is_finished(),
            "read_to_end returned with nothing sent"
        );
        (&a).write_all(b"paired").unwrap();
        spindle::sleep(SETTLE).unwrap();
        a.shutdown(Shutdown::Write).unwrap();
        assert_eq!(reader.join().unwrap().unwrap(), b"paired");

        let limit = Duration::from_millis(50);
        a.set_read_timeout(Some(limit)).unwrap();
        let t = Instant::now();
        let e = expect_err((&a).read(&mut [0u8; 8]), "a read with nothing sent");
        let took = t.elapsed();
        assert_wait_error(&e, ErrorKind::TimedOut, WaitError::TimedOut);
        assert!(took >= limit, "ended after {took:?}, before {limit:?}");
        assert!(took < PROMPTLY, "ended after {took:?}");
    });
}

/// Guards Unix from_std: std's pair and listener, taken over, work as tasks' sockets.
#[test]
fn unix_from_std_sockets_work_in_tasks() {
    let path = SocketPath::new("from-std");
    let rt = rt(1);
    let std_listener = std::os::unix::net::UnixListener::bind(path.path()).unwrap();
    let listener = UnixListener::from_std(std_listener).unwrap();
    let (x, y) = std::os::unix::net::UnixStream::pair().unwrap();
    let (x, y) = (
        UnixStream::from_std(x).unwrap(),
        UnixStream::from_std(y).unwrap(),
    );
    rt.block_on(move || {
        y.set_read_timeout(Some(BACKSTOP)).unwrap();
        let reader = spindle::spawn(move || {
            let mut b = [0u8; 3];
            (&y).read_exact(&mut b).map(|()| b)
        });
        spindle::sleep(SETTLE).unwrap();
        (&x).write_all(b"std").unwrap();
        assert_eq!(&reader.join().unwrap().unwrap(), b"std");

        let p = path.path().to_path_buf();
        let client = spindle::spawn(move || UnixStream::connect(p.as_path()).map(drop));
        let (s, _) = listener.accept().unwrap();
        client.join().unwrap().unwrap();
        s.set_read_timeout(Some(BACKSTOP)).unwrap();
        assert_eq!((&s).read(&mut [0u8; 8]).unwrap(), 0, "the client closed");
    });
}

/// Guards bad input: a zero timeout is InvalidInput (as std) and leaves no timeout set, on every kind of socket.
#[test]
fn a_zero_timeout_is_invalid_input() {
    let rt = rt(1);
    rt.block_on(|| {
        let (c, _s) = net_common::tcp_pair();
        let e = expect_err(
            c.set_read_timeout(Some(Duration::ZERO)),
            "a zero read timeout",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e:?}");
        let e = expect_err(
            c.set_write_timeout(Some(Duration::ZERO)),
            "a zero write timeout",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e:?}");
        assert_eq!(c.read_timeout().unwrap(), None);
        assert_eq!(c.write_timeout().unwrap(), None);

        let u = UdpSocket::bind(LOOPBACK).unwrap();
        let e = expect_err(
            u.set_read_timeout(Some(Duration::ZERO)),
            "a zero UDP timeout",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e:?}");
        let e = expect_err(
            u.set_write_timeout(Some(Duration::ZERO)),
            "a zero UDP timeout",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e:?}");

        let (x, _y) = UnixStream::pair().unwrap();
        let e = expect_err(
            x.set_read_timeout(Some(Duration::ZERO)),
            "a zero Unix timeout",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e:?}");
        let e = expect_err(
            x.set_write_timeout(Some(Duration::ZERO)),
            "a zero Unix timeout",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e:?}");

        // connect_timeout with a zero timeout, as std.
        let addr = c.peer_addr().unwrap();
        let r = TcpStream::connect_timeout(&addr, Duration::ZERO).map(drop);
        let e = expect_err(r, "a zero connect timeout");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e:?}");
    });
}

/// Guards bad names: an unresolvable name or an address without a port is an error, not a hang, and the worker stays free meanwhile.
#[test]
fn an_unresolvable_name_is_an_error_not_a_hang() {
    let rt = rt(1);
    rt.block_on(|| {
        let ticker = Ticker::start();
        let before = ticker.ticks();
        let t = Instant::now();
        let r = TcpStream::connect("nonexistent.invalid:80").map(drop);
        let took = t.elapsed();
        expect_err(r, "a connect to nonexistent.invalid");
        // Resolvers without a network wait out their own timeouts: bound
        // the call well beyond those, to tell a slow resolver from a hang.
        assert!(took < Duration::from_secs(60), "took {took:?}");
        if took > Duration::from_millis(200) {
            assert!(
                ticker.ticks() > before,
                "the ticker stood still for {took:?}"
            );
        }
        let t = Instant::now();
        expect_err(
            lookup_host("nonexistent.invalid:80").map(|a| a.count()),
            "lookup_host(nonexistent.invalid)",
        );
        assert!(t.elapsed() < Duration::from_secs(60));
        expect_err(
            TcpStream::connect("127.0.0.1").map(drop),
            "a connect to an address without a port",
        );
        expect_err(
            lookup_host("not an address").map(|a| a.count()),
            "lookup_host(\"not an address\")",
        );
        ticker.finish();
    });
}
