//! A TCP echo server that shuts down gracefully: one task per connection,
//! each a plain blocking loop of `read` and `write_all` that suspends only
//! its task, all in a `JoinSet`.
//!
//! `cargo run --release --example echo_server -- --addr 127.0.0.1:7878`
//!
//! On Ctrl-C (or SIGTERM) it stops accepting, gives the open connections
//! `--drain SECS` (default 5) to finish, then stops those still open (their
//! waits end at once) and exits. An accept that fails (out of fds, say)
//! backs off, 1 ms doubling up to 1 s, rather than spin.
//!
//! `kill -QUIT <pid>` (or Ctrl-\\) prints a dump of its tasks to stderr:
//! each connection's task, what it waits on, and where
//! (`docs/observing.md`).
//!
//! Options: `--workers N` (default: one per CPU); `--serve N` to exit after
//! N connections have closed (as CI runs it); `--idle-timeout SECS` to drop
//! connections silent that long (a socket read timeout); `--drain SECS`.

use spindle::net::{TcpListener, TcpStream};
use spindle::signal::Signals;
use spindle::sync::{mpsc, Select};
use spindle::JoinSet;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

struct Args {
    addr: String,
    workers: Option<usize>,
    serve: Option<u64>,
    idle_timeout: Option<Duration>,
    drain: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:7878".into(),
        workers: None,
        serve: None,
        idle_timeout: None,
        drain: Duration::from_secs(5),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--addr" => args.addr = value()?,
            "--workers" => args.workers = Some(number(value()?)? as usize),
            "--serve" => args.serve = Some(number(value()?)?),
            "--idle-timeout" => args.idle_timeout = Some(Duration::from_secs(number(value()?)?)),
            "--drain" => args.drain = Duration::from_secs(number(value()?)?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

/// Echoes until the peer closes, the idle timeout passes, or an error
/// (a stop at shutdown ends the wait it is in).
fn echo(stream: TcpStream) -> io::Result<u64> {
    let mut buf = [0u8; 16 * 1024];
    let mut echoed = 0;
    loop {
        let n = (&stream).read(&mut buf)?;
        if n == 0 {
            return Ok(echoed);
        }
        (&stream).write_all(&buf[..n])?;
        echoed += n as u64;
    }
}

/// What the server has done, for its last line.
#[derive(Default)]
struct Tally {
    accepted: u64,
    closed: u64,
    bytes: u64,
    stopped: u64,
}

impl Tally {
    /// Counts a connection's end.
    fn end(&mut self, r: Result<io::Result<u64>, spindle::JoinError>) {
        self.closed += 1;
        match r {
            Ok(Ok(n)) => self.bytes += n,
            Ok(Err(e)) if spindle::io::wait_error(&e) == Some(spindle::WaitError::Stopped) => {
                self.stopped += 1
            }
            Ok(Err(e)) => eprintln!("echo_server: connection: {e}"),
            Err(e) => eprintln!("echo_server: connection task: {e}"),
        }
    }
}

/// Waits between failed accepts: 1 ms, doubling up to 1 s; reset by an
/// accept that succeeds.
struct Backoff(Duration);

impl Backoff {
    const FIRST: Duration = Duration::from_millis(1);
    const MAX: Duration = Duration::from_secs(1);

    fn failed(&mut self, e: &io::Error) {
        if self.0 == Self::FIRST {
            eprintln!("echo_server: accept: {e} (backing off)");
        }
        let _ = spindle::sleep(self.0);
        self.0 = (self.0 * 2).min(Self::MAX);
    }
}

fn main() {
    spindle_examples::init_tracing();
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("echo_server: {e}");
        std::process::exit(2);
    });
    let mut builder = spindle::Runtime::builder().dump_on_signal(libc::SIGQUIT);
    if let Some(n) = args.workers {
        builder = builder.workers(n);
    }
    let rt = builder.build().expect("start the runtime");
    let tally = rt.block_on(|| serve(&args));
    println!(
        "served {} connections, echoed {} bytes; {} closed, {} stopped at shutdown",
        tally.accepted, tally.bytes, tally.closed, tally.stopped
    );
}

fn serve(args: &Args) -> Tally {
    let listener = TcpListener::bind(args.addr.as_str()).unwrap_or_else(|e| {
        eprintln!("echo_server: cannot bind {}: {e}", args.addr);
        std::process::exit(1);
    });
    println!("listening on {}", listener.local_addr().unwrap());

    // Ctrl-C and SIGTERM arrive as a message: the accept loop selects on it
    // beside the listener.
    let (shutdown_tx, shutdown) = mpsc::channel::<i32>();
    let signals = Signals::new(&[libc::SIGINT, libc::SIGTERM]).expect("watch for signals");
    let watcher = spindle::task::Builder::new()
        .name("signal watcher")
        .spawn(move || {
            if let Ok(sig) = signals.recv() {
                let _ = shutdown_tx.send(sig);
            }
        })
        .expect("spawn the signal watcher");

    let mut conns = JoinSet::new();
    let mut tally = Tally::default();
    let mut backoff = Backoff(Backoff::FIRST);
    while args.serve.is_none_or(|n| tally.accepted < n) {
        let mut sel = Select::new();
        let stop = sel.recv(&shutdown);
        sel.readable(listener.as_fd());
        let chosen = sel.select().map(|op| op.index());
        drop(sel);
        if chosen == Ok(stop) {
            let sig = shutdown.recv().unwrap_or(0);
            eprintln!("echo_server: signal {sig}: draining for {:?}", args.drain);
            break;
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                backoff = Backoff(Backoff::FIRST);
                tally.accepted += 1;
                let _ = stream.set_nodelay(true);
                if let Some(t) = args.idle_timeout {
                    let _ = stream.set_read_timeout(Some(t));
                }
                let named = spindle::task::Builder::new().name(format!("conn {peer}"));
                if let Err(e) = conns.spawn_with(named, move || echo(stream)) {
                    eprintln!("echo_server: cannot spawn a connection's task: {e}");
                }
            }
            Err(e) => backoff.failed(&e),
        }
        // Connections that have closed are counted as we go.
        while let Some((_, r)) = conns.try_join_next() {
            tally.end(r);
        }
    }
    drop(listener);

    // Drain: the open connections get `--drain` to finish (unbounded when
    // serving a fixed count), then the rest are stopped and joined.
    let drain_until = match args.serve {
        Some(_) => None,
        None => Some(Instant::now() + args.drain),
    };
    let mut drain = || loop {
        match conns.join_next() {
            Ok(Some((_, r))) => tally.end(r),
            Ok(None) => return true,
            Err(_) => return false,
        }
    };
    let drained = match drain_until {
        Some(d) => spindle::with_deadline(d, drain),
        None => drain(),
    };
    if !drained {
        eprintln!(
            "echo_server: stopping {} connections still open",
            conns.len()
        );
        conns.stop_all();
        while let Ok(Some((_, r))) = conns.join_next() {
            tally.end(r);
        }
    }
    let _ = watcher.stop();
    tally
}
