//! The `echo` benchmark's load generator: one closed-loop client, the same
//! for every server, so that only the server differs between runs.
//!
//! ```text
//! echo_client --addr 127.0.0.1:PORT --conns 64 --size 64 --secs 5 [--warmup 1]
//! echo_client --addr 127.0.0.1:PORT --idle 10000 --hold 30
//! ```
//!
//! One thread drives every connection through `mio` (epoll): a client of
//! its own per connection would cost more than some of the servers it
//! measures, on a 2-core host where client and server share the cores.
//! Each connection sends one message of `--size` bytes, reads the whole
//! echo back (checking its bytes), records the round trip and sends the
//! next: requests per second then measure the server's latency under load,
//! not how much load a client can queue. All connections are made (with
//! TCP_NODELAY) before the clock starts; round trips that end in the
//! `--warmup` seconds are not counted. The last line printed is
//!
//! ```text
//! conns=64 size=64 rps=123456 p50_us=20.1 p99_us=48.3 errors=0
//! ```
//!
//! with percentiles nearest-rank from a log-linear histogram (64 buckets
//! per power of two, under 1.6 % apart), and `errors` the connections lost
//! (reset, closed, or a wrong byte echoed); the exit status is 1 if any was.
//!
//! `--idle N --hold SECS` opens N connections, makes one 1-byte round trip
//! on each (so every one has been accepted and served once, as a kept-alive
//! connection between requests has), prints `ready`, and holds them open
//! for SECS seconds: the driver reads the server's resident memory
//! meanwhile.

use mio::event::Event;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use spindle_benches::echo::raise_nofile_limit;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long the idle mode waits for its round trips before it gives up.
const IDLE_SETUP_LIMIT: Duration = Duration::from_secs(120);

/// What to do, from the command line.
#[derive(Debug)]
enum Mode {
    Load {
        conns: usize,
        size: usize,
        secs: Duration,
        warmup: Duration,
    },
    Idle {
        conns: usize,
        hold: Duration,
    },
}

fn main() -> ExitCode {
    let (addr, mode) = parse_args();
    if let Err(e) = raise_nofile_limit() {
        eprintln!("echo_client: cannot raise the open-file limit: {e}");
    }
    match run(addr, mode) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("echo_client: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `mode` against the server at `addr`; returns the connections lost.
fn run(addr: SocketAddr, mode: Mode) -> io::Result<u64> {
    match mode {
        Mode::Load {
            conns,
            size,
            secs,
            warmup,
        } => {
            let mut driver = Driver::connect(addr, conns, size, None)?;
            let report = driver.measure(warmup, secs)?;
            println!(
                "conns={conns} size={size} rps={:.0} p50_us={:.1} p99_us={:.1} errors={}",
                report.rps, report.p50_us, report.p99_us, driver.errors
            );
            Ok(driver.errors)
        }
        Mode::Idle { conns, hold } => {
            let started = Instant::now();
            let mut driver = Driver::connect(addr, conns, 1, Some(1))?;
            driver.until_all_done(IDLE_SETUP_LIMIT)?;
            if driver.errors > 0 {
                eprintln!("echo_client: {} idle connections lost", driver.errors);
            }
            eprintln!(
                "echo_client: {conns} connections open and served in {:.2} s",
                started.elapsed().as_secs_f64()
            );
            println!("ready");
            io::stdout().flush()?;
            std::thread::sleep(hold);
            Ok(driver.errors)
        }
    }
}

/// Round trips per second and latency percentiles of one measured run.
#[derive(Debug)]
struct Report {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
}

/// One connection's place in its current round trip.
#[derive(Debug)]
struct Conn {
    /// `None` once the connection is lost.
    stream: Option<TcpStream>,
    /// Bytes of the current message written, and echoed back.
    written: usize,
    read: usize,
    /// When the current message's first byte was handed to the kernel.
    sent_at: Instant,
    /// Round trips finished.
    rounds: u64,
}

/// Every connection, driven from one thread by one `Poll`.
#[derive(Debug)]
struct Driver {
    poll: Poll,
    conns: Vec<Conn>,
    /// The message sent on every connection, and a buffer to read echoes into.
    message: Vec<u8>,
    scratch: Vec<u8>,
    /// Stop a connection after this many round trips (`None`: never).
    max_rounds: Option<u64>,
    /// Connections that have stopped, by `max_rounds` or by losing them.
    finished: usize,
    errors: u64,
    /// Round trips that end while `recording` are counted and timed.
    recording: bool,
    completed: u64,
    latencies: Histogram,
}

impl Driver {
    /// Opens `n` connections to `addr`, registers them and sends each its
    /// first message of `size` bytes.
    fn connect(
        addr: SocketAddr,
        n: usize,
        size: usize,
        max_rounds: Option<u64>,
    ) -> io::Result<Driver> {
        let poll = Poll::new()?;
        let mut conns = Vec::with_capacity(n);
        for i in 0..n {
            // A blocking connect, one at a time: the simplest way to pace
            // thousands of them to the server's accept queue.
            let stream = std::net::TcpStream::connect(addr)
                .map_err(|e| io::Error::new(e.kind(), format!("connection {i}: {e}")))?;
            stream.set_nodelay(true)?;
            stream.set_nonblocking(true)?;
            let mut stream = TcpStream::from_std(stream);
            poll.registry().register(
                &mut stream,
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            conns.push(Conn {
                stream: Some(stream),
                written: 0,
                read: 0,
                sent_at: Instant::now(),
                rounds: 0,
            });
        }
        let mut driver = Driver {
            poll,
            conns,
            message: (0..size).map(|i| (i % 251) as u8).collect(),
            scratch: vec![0; size],
            max_rounds,
            finished: 0,
            errors: 0,
            recording: false,
            completed: 0,
            latencies: Histogram::new(),
        };
        let now = Instant::now();
        for i in 0..n {
            driver.start_round(i, now);
        }
        Ok(driver)
    }

    /// Runs the closed loops for `warmup` and then `secs` more, counting
    /// and timing the round trips that end in the second span.
    fn measure(&mut self, warmup: Duration, secs: Duration) -> io::Result<Report> {
        let mut events = Events::with_capacity(1024);
        let start = Instant::now();
        let measure_from = start + warmup;
        let end = measure_from + secs;
        let mut measured_since = start;
        let mut now = start;
        self.recording = warmup.is_zero();
        while now < end && self.finished < self.conns.len() {
            let timeout = (end - now).min(Duration::from_millis(100));
            self.poll_once(&mut events, timeout)?;
            now = Instant::now();
            if !self.recording && now >= measure_from {
                self.recording = true;
                measured_since = now;
            }
        }
        let elapsed = now.saturating_duration_since(measured_since).as_secs_f64();
        Ok(Report {
            rps: if elapsed > 0.0 {
                self.completed as f64 / elapsed
            } else {
                0.0
            },
            p50_us: self.latencies.percentile(0.50) as f64 / 1e3,
            p99_us: self.latencies.percentile(0.99) as f64 / 1e3,
        })
    }

    /// Runs until every connection has finished its rounds, or `limit`.
    fn until_all_done(&mut self, limit: Duration) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let give_up = Instant::now() + limit;
        while self.finished < self.conns.len() {
            let now = Instant::now();
            if now >= give_up {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} of {} connections not served within {limit:?}",
                        self.conns.len() - self.finished,
                        self.conns.len()
                    ),
                ));
            }
            self.poll_once(&mut events, (give_up - now).min(Duration::from_millis(100)))?;
        }
        Ok(())
    }

    fn poll_once(&mut self, events: &mut Events, timeout: Duration) -> io::Result<()> {
        match self.poll.poll(events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        for event in events.iter() {
            self.on_event(event);
        }
        Ok(())
    }

    /// Moves connection `event.token()` on as far as its socket allows.
    ///
    /// Events are edge-triggered. A message is read only once it is all
    /// written: its last echoed bytes can only arrive after that, and their
    /// arrival is an edge of its own. A write goes on at once after the
    /// previous echo, and waits for a writable edge only if the socket's
    /// buffer is full.
    fn on_event(&mut self, event: &Event) {
        let i = event.token().0;
        let size = self.message.len();
        if self.conns[i].stream.is_none() {
            return;
        }
        if self.conns[i].written < size {
            self.write_some(i);
            return;
        }
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            self.read_some(i);
        }
    }

    /// Starts connection `i`'s next round trip at `now`, unless it has
    /// done its rounds.
    fn start_round(&mut self, i: usize, now: Instant) {
        let conn = &mut self.conns[i];
        if self.max_rounds.is_some_and(|max| conn.rounds >= max) {
            self.finished += 1;
            return;
        }
        conn.written = 0;
        conn.read = 0;
        conn.sent_at = now;
        self.write_some(i);
    }

    /// Writes what it can of connection `i`'s message.
    fn write_some(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        let Some(stream) = conn.stream.as_mut() else {
            return;
        };
        while conn.written < self.message.len() {
            match stream.write(&self.message[conn.written..]) {
                Ok(0) => return self.lose(i, "write returned 0"),
                Ok(n) => conn.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.lose(i, &e.to_string()),
            }
        }
    }

    /// Reads what has arrived of connection `i`'s echo; at its end, records
    /// the round trip and starts the next.
    fn read_some(&mut self, i: usize) {
        let size = self.message.len();
        loop {
            let conn = &mut self.conns[i];
            let Some(stream) = conn.stream.as_mut() else {
                return;
            };
            // Never read past this message: the next is not sent yet.
            let want = size - conn.read;
            match stream.read(&mut self.scratch[..want]) {
                Ok(0) => return self.lose(i, "closed by the server"),
                Ok(n) => {
                    if self.scratch[..n] != self.message[conn.read..conn.read + n] {
                        return self.lose(i, "echoed wrong bytes");
                    }
                    conn.read += n;
                    if conn.read == size {
                        let now = Instant::now();
                        conn.rounds += 1;
                        if self.recording {
                            self.completed += 1;
                            self.latencies.record(duration_ns(now - conn.sent_at));
                        }
                        return self.start_round(i, now);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.lose(i, &e.to_string()),
            }
        }
    }

    /// Closes connection `i` for good and counts it as an error.
    fn lose(&mut self, i: usize, why: &str) {
        if self.conns[i].stream.take().is_some() {
            if self.errors == 0 {
                eprintln!("echo_client: connection {i} lost: {why}");
            }
            self.errors += 1;
            self.finished += 1;
        }
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A log-linear histogram of nanoseconds: values below 64 exactly, then 64
/// buckets for each power of two, so that a bucket's values are within
/// 1/64 of each other. Bounded memory whatever the number of samples.
#[derive(Debug)]
struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

/// Sub-buckets per power of two, as a power of two.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

impl Histogram {
    fn new() -> Self {
        Histogram {
            counts: vec![0; Self::index(u64::MAX) + 1],
            total: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        // v is in [2^k, 2^(k+1)) with k >= SUB_BITS.
        let k = 63 - v.leading_zeros();
        let sub = (v >> (k - SUB_BITS)) - SUB;
        ((k - SUB_BITS + 1) as u64 * SUB + sub) as usize
    }

    /// The middle of bucket `i`'s values.
    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < SUB {
            return i;
        }
        let k = (i / SUB) as u32 + SUB_BITS - 1;
        let low = (SUB + i % SUB) << (k - SUB_BITS);
        let width = 1u64 << (k - SUB_BITS);
        low + (width - 1) / 2
    }

    fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.total += 1;
    }

    /// The nearest-rank `p` quantile (0 with no samples).
    fn percentile(&self, p: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((p * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i);
            }
        }
        unreachable!("rank {rank} is at most the total {}", self.total)
    }
}

fn parse_args() -> (SocketAddr, Mode) {
    let mut addr = None;
    let (mut conns, mut size, mut secs, mut warmup) = (None, None, None, 0.0);
    let (mut idle, mut hold) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            usage(&format!("{flag} needs a value"));
        };
        match flag.as_str() {
            "--addr" => addr = Some(parse(&flag, &value)),
            "--conns" => conns = Some(parse(&flag, &value)),
            "--size" => size = Some(parse(&flag, &value)),
            "--secs" => secs = Some(parse(&flag, &value)),
            "--warmup" => warmup = parse(&flag, &value),
            "--idle" => idle = Some(parse(&flag, &value)),
            "--hold" => hold = Some(parse(&flag, &value)),
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    let addr = addr.unwrap_or_else(|| usage("--addr is required"));
    let seconds = |s: f64| {
        Duration::try_from_secs_f64(s).unwrap_or_else(|_| usage(&format!("bad duration {s}")))
    };
    let mode = match idle {
        Some(n) => Mode::Idle {
            conns: n,
            hold: seconds(hold.unwrap_or(f64::from(u32::MAX))),
        },
        None => {
            let conns: usize = conns.unwrap_or_else(|| usage("--conns is required"));
            let size: usize = size.unwrap_or_else(|| usage("--size is required"));
            if conns == 0 || size == 0 {
                usage("--conns and --size must be positive");
            }
            Mode::Load {
                conns,
                size,
                secs: seconds(secs.unwrap_or_else(|| usage("--secs is required"))),
                warmup: seconds(warmup),
            }
        }
    };
    (addr, mode)
}

fn parse<T: std::str::FromStr>(flag: &str, value: &str) -> T
where
    T::Err: std::fmt::Display,
{
    value
        .parse()
        .unwrap_or_else(|e| usage(&format!("{flag} {value}: {e}")))
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "echo_client: {problem}\n\
         usage: echo_client --addr HOST:PORT --conns C --size BYTES --secs S [--warmup S]\n       \
         echo_client --addr HOST:PORT --idle N [--hold S]"
    );
    std::process::exit(2)
}

#[cfg(test)]
mod tests {
    use super::Histogram;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut prev = 0;
        for v in 0..1u64 << 20 {
            let i = Histogram::index(v);
            assert!(i == prev || i == prev + 1, "gap at {v}");
            prev = i;
        }
        for v in (0..1u64 << 20).chain([u64::MAX / 3, u64::MAX]) {
            let mid = Histogram::value(Histogram::index(v));
            assert!(mid.abs_diff(v) <= v / 64, "{v} in a bucket around {mid}");
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut h = Histogram::new();
        for v in 1..=100 {
            h.record(v * 1000);
        }
        assert!(h.percentile(0.5).abs_diff(50_000) <= 50_000 / 64);
        assert!(h.percentile(0.99).abs_diff(99_000) <= 99_000 / 64);
        assert_eq!(Histogram::new().percentile(0.5), 0);
    }
}
