//! Helpers shared by the network I/O tests: connected pairs, an echo
//! server, the error a wait ended with, a task that shows its worker is
//! free, and the file-descriptor limit (test data: `spindle_testkit`'s
//! `pattern` and `Rng`).

// Each test binary compiles this module and uses only some of it.
#![allow(dead_code)]

use spindle::net::{TcpListener, TcpStream};
use spindle::{JoinHandle, NoSuchTask, Runtime, TaskId, WaitError};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A loopback address whose port the kernel picks.
pub const LOOPBACK: &str = "127.0.0.1:0";

/// A socket timeout that never fires in a passing test. Set on a socket
/// whose wait a test expects something else to end (an interrupt, a stop,
/// a deadline scope, data), it turns a wait that nothing ended into a
/// failure instead of a hang.
pub const BACKSTOP: Duration = Duration::from_secs(30);

/// What "at once" and "promptly" mean on a busy 2-core CI machine.
pub const PROMPTLY: Duration = Duration::from_secs(5);

/// How long a test lets a task run into its wait before it ends the wait
/// some other way. Too short only weakens the test: a signal that lands
/// before the wait is remembered, and data that comes first is read.
pub const SETTLE: Duration = Duration::from_millis(30);

/// The `WaitError` an I/O error carries when a wait ended it.
pub fn wait_error(e: &io::Error) -> Option<WaitError> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<WaitError>())
        .copied()
}

/// Asserts that `e` is of `kind` and carries `inner`.
#[track_caller]
pub fn assert_wait_error(e: &io::Error, kind: io::ErrorKind, inner: WaitError) {
    assert_eq!(e.kind(), kind, "the kind of {e:?}");
    assert_eq!(wait_error(e), Some(inner), "the inner error of {e:?}");
}

/// The error `r` holds; panics, naming `what`, if it is `Ok`. (Taking the
/// result as an argument keeps the byte count of a read that was expected
/// to fail from looking unused.)
#[track_caller]
pub fn expect_err<T: std::fmt::Debug>(r: io::Result<T>, what: &str) -> io::Error {
    match r {
        Ok(v) => panic!("{what}: Ok({v:?}) where an error was expected"),
        Err(e) => e,
    }
}

/// A connected pair of loopback TCP streams, (client, server side). Works
/// in a task and on a plain thread: the kernel completes the connection
/// before the accept.
pub fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind(LOOPBACK).expect("bind a loopback listener");
    let addr = listener.local_addr().expect("the listener's address");
    let client = TcpStream::connect(addr).expect("connect to the listener");
    let (server, peer) = listener.accept().expect("accept");
    assert_eq!(peer, client.local_addr().expect("the client's address"));
    (client, server)
}

/// Echoes what `s` reads back to it until EOF; returns the bytes echoed.
pub fn echo(mut s: impl Read + Write) -> io::Result<u64> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0;
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        s.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// Accepts `conns` connections from `listener` and echoes each in a task
/// of its own (call it from a task: they run on its runtime); returns,
/// once every connection is closed, the bytes echoed in all.
pub fn echo_server(listener: TcpListener, conns: usize) -> u64 {
    let echoes: Vec<JoinHandle<u64>> = (0..conns)
        .map(|_| {
            let (s, _) = listener.accept().expect("accept");
            spindle::spawn(move || echo(s).expect("echo"))
        })
        .collect();
    echoes.into_iter().map(|h| h.join().unwrap()).sum()
}

/// Runs `op` in a task of `rt`, lets it get into its wait, then signals
/// the task with `signal` (`spindle::interrupt` or `spindle::stop`) from
/// this plain thread; returns what `op` returned and how long it took.
pub fn signalled<T: Send + 'static>(
    rt: &Runtime,
    signal: fn(TaskId) -> Result<(), NoSuchTask>,
    op: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let task = rt.spawn(move || {
        s.store(true, Ordering::SeqCst);
        let t = Instant::now();
        let r = op();
        (r, t.elapsed())
    });
    spindle_testkit::wait_for("the task to start", || started.load(Ordering::SeqCst));
    std::thread::sleep(SETTLE);
    signal(task.id()).expect("the task ended before it was signalled");
    task.join().unwrap()
}

/// Whether a new task of `rt` runs to its end within `limit`, looked at
/// from this plain thread. Never hangs: a task that does not run is left
/// behind.
pub fn a_task_runs_within(rt: &Runtime, limit: Duration) -> bool {
    let task = rt.spawn(|| spindle::sleep(Duration::from_millis(1)).is_ok());
    let t = Instant::now();
    while !task.is_finished() && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(1));
    }
    task.is_finished() && task.join().unwrap()
}

/// A task that counts its 1 ms sleeps until it is finished or dropped. If
/// the count moves while another task of a 1-worker runtime waits, that
/// wait left the worker free.
pub struct Ticker {
    ticks: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    task: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Starts the ticker with `spindle::spawn`: call it from a task, so
    /// that it runs on that task's runtime.
    pub fn start() -> Ticker {
        let ticks = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (t, d) = (ticks.clone(), done.clone());
        let task = spindle::spawn(move || {
            while !d.load(Ordering::SeqCst) {
                let _ = spindle::sleep(Duration::from_millis(1));
                t.fetch_add(1, Ordering::SeqCst);
            }
        });
        Ticker {
            ticks,
            done,
            task: Some(task),
        }
    }

    /// The ticks so far.
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::SeqCst)
    }

    /// Stops the ticker and joins it; returns its count.
    pub fn finish(mut self) -> u64 {
        self.done.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            task.join().unwrap();
        }
        self.ticks()
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        // A failing test must not leave the ticker running for good.
        self.done.store(true, Ordering::SeqCst);
    }
}

/// Raises this process's soft limit on open files to `want` (or to the
/// hard limit, if that is lower); returns the soft limit now.
pub fn raise_fd_limit(want: libc::rlim_t) -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into `lim`, a valid rlimit.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert_eq!(r, 0, "getrlimit: {}", io::Error::last_os_error());
    if lim.rlim_cur < want {
        lim.rlim_cur = want.min(lim.rlim_max);
        // SAFETY: setrlimit only reads `lim`, a valid rlimit.
        let r = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
        assert_eq!(r, 0, "setrlimit: {}", io::Error::last_os_error());
    }
    lim.rlim_cur
}

/// Three clients, connected by `connect` from a task, each sending one byte
/// (0, 1, 2); the first three connections of `incoming` are read, a byte
/// each, under `set_timeout`. Returns the bytes seen, sorted, once the
/// clients (all three connected) are joined.
pub fn one_byte_from_three_clients<S>(
    connect: impl Fn() -> io::Result<S> + Send + 'static,
    incoming: impl Iterator<Item = io::Result<S>>,
    set_timeout: impl Fn(&S) -> io::Result<()>,
) -> Vec<u8>
where
    S: Send + 'static,
    for<'a> &'a S: Read + Write,
{
    let clients = spindle::spawn(move || {
        (0..3u8)
            .map(|i| {
                let c = connect().unwrap();
                (&c).write_all(&[i]).unwrap();
                c
            })
            .collect::<Vec<_>>()
    });
    let mut seen: Vec<u8> = incoming
        .take(3)
        .map(|s| {
            let s = s.unwrap();
            set_timeout(&s).unwrap();
            let mut b = [0u8; 1];
            (&s).read_exact(&mut b).unwrap();
            b[0]
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(clients.join().unwrap().len(), 3);
    seen
}
