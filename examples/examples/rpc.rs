//! spindle's flagship: an RPC service and its clients, over real TCP, in one
//! process. Run it first:
//!
//!     cargo run --release --example rpc            # about 5 s
//!     cargo run --release --example rpc -- --quick # about 1 s, as CI runs it
//!
//! # What runs
//!
//! ```text
//!  callers ──(pooled conns)──► front server ──(pooled conns)──► backend
//!  (tasks, each call           (a task per connection,          (the same
//!   under with_deadline)        a task per request)              server code)
//! ```
//!
//! - **Callers**: `--concurrency` tasks, each making calls back to back,
//!   every call under `spindle::with_deadline` (`--deadline-ms`). They share
//!   a pool of `--conns` connections; a call writes its request, then waits
//!   for its reply on a `oneshot` that the connection's reader task fills
//!   in. A canceller task interrupts a caller now and then, as a user who
//!   gives up would: the caller's wait ends with `Interrupted`, and it tells
//!   the server to drop the work (a `CANCEL` frame, which stops the
//!   request's task).
//! - **The front server**: an accept loop, a task per connection that reads
//!   requests, and a task per request, spawned into the connection's
//!   `JoinSet` with the request's deadline (it travels in the request as
//!   the time left, so the clocks need not agree). Most requests are
//!   answered at once; one in ten waits a heavy-tailed time (a Pareto draw:
//!   a few wait long). One in four also needs the **backend**, asked over
//!   the front's own pool of connections, *hedged*: if the answer is not in
//!   within 5 ms, a second copy of the request goes out on another
//!   connection; the first answer wins and the other attempt is stopped.
//!   Both attempts are children of the request's task, in a `JoinSet`: they
//!   run under its deadline, and if the request is stopped, they are too.
//!   Work whose deadline has passed is dropped, and said so (`EXPIRED`).
//!
//! Every blocking call here — `connect`, `read`, `write_all`, a channel's
//! `recv`, a `sleep`, a `join_next` — suspends only its task; a worker
//! thread per CPU runs them all.
//!
//! # Reading the output
//!
//! While it runs, one line (rewritten in place on a terminal, a line a
//! second otherwise): calls so far and per second, timeouts, cancellations,
//! live tasks, and how busy each worker was over the last interval. A task
//! stays on the worker it first ran on (`docs/design.md`, "Placement"), and
//! starts where it was spawned: a connection's task and the requests it
//! spawns share a worker, so the workers are seldom equally busy. At the
//! end:
//!
//! - `calls`: how each call ended. A *timeout* is a call whose deadline
//!   passed first (or whose answer arrived after it: counted as a timeout,
//!   never as a success); *cancelled*, a call the canceller interrupted.
//! - `latency`: of the calls that succeeded, as their callers saw it (a
//!   caller may resume a little after its answer arrived, so the tail can
//!   pass the deadline).
//! - `front`, `backend`: requests served, work dropped because its deadline
//!   passed (before it began, or while it ran), requests cancelled (and how
//!   many `CANCEL`s came too late, after the answer); `fan-out`: how often
//!   the front asked the backend, hedged, and how often the hedge won.
//! - `timer`: the process's timer thread. Every call arms a timer for its
//!   deadline, and the answer cancels it: almost all are cancelled, not
//!   fired. What fires is the slow requests' sleeps and the hedges' delays
//!   (those are meant to fire), and the deadlines that did pass. That is
//!   the design: arming and cancelling are the cheap, hot path.
//! - `runtime`: tasks spawned (one per request and per backend attempt),
//!   switches, steals, parks, and each worker's busy time.
//! - `invariants`: what the run checked (below). It exits 1 if one broke.
//!
//! # What it checks
//!
//! Every reply names a call in flight on its connection, and every call
//! gets exactly one reply (the counts balance on both sides of each
//! connection); every answer is the right value for its request; each call
//! ended exactly one way (answered, timed out, cancelled); no success
//! arrived after its deadline, no timeout came before it, and no `EXPIRED`
//! reply before the deadline it reports; no more cancellations than
//! interrupts sent; no request handler panicked; no task is left running.
//!
//! Ctrl-C (or SIGTERM) stops the callers early and shuts down as at the
//! end: callers finish their call, connections close once every request in
//! flight is answered, servers drain. `kill -QUIT <pid>` (Ctrl-\\) prints a
//! dump of every task to stderr: the callers waiting for replies, each
//! request's task and what it waits on (`docs/observing.md`).
//!
//! Options: `--conns N` (client connections, default 4), `--concurrency N`
//! (calling tasks, default 64), `--deadline-ms N` (default 20),
//! `--duration SECS` (default 5), `--workers N` (default: one per CPU),
//! `--quick` (a 1 s run).

use spindle::net::{TcpListener, TcpStream};
use spindle::sync::{mpsc, oneshot, Mutex, Select};
use spindle::{task, JoinError, JoinSet, SleepError, TaskId, WaitError};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ─────────────────────────────────────────────────────────── the protocol
//
// Every message is one frame, integers big-endian:
//
//     len      u32  bytes that follow: 13, or 21 with a payload
//     id       u64  the call's id, chosen by the caller, echoed in the reply
//     budget   u32  the call's deadline as the time left when it was sent, in
//                   µs (NO_DEADLINE: none); 0 in replies
//     kind     u8   CALL, CANCEL, OK, EXPIRED, CANCELLED
//     payload  u64  CALL: the key; OK: the value; the other kinds have none
//
// A CALL gets exactly one reply: OK, EXPIRED (its deadline passed at the
// server, which dropped the work) or CANCELLED (the caller sent CANCEL with
// its id, and the server stopped the work).

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Call = 1,
    Cancel = 2,
    Ok = 3,
    Expired = 4,
    Cancelled = 5,
}

/// The budget of a call without a deadline.
const NO_DEADLINE: u32 = u32::MAX;
/// Bytes of a frame before its payload.
const HEADER: usize = 4 + 8 + 4 + 1;

/// One message; see the layout above.
#[derive(Clone, Copy, Debug)]
struct Frame {
    id: u64,
    budget_us: u32,
    kind: Kind,
    payload: Option<u64>,
}

impl Frame {
    fn call(id: u64, key: u64, deadline: Option<Instant>) -> Frame {
        Frame {
            id,
            budget_us: budget(deadline),
            kind: Kind::Call,
            payload: Some(key),
        }
    }

    fn control(id: u64, kind: Kind) -> Frame {
        Frame {
            id,
            budget_us: 0,
            kind,
            payload: None,
        }
    }

    fn ok(id: u64, value: u64) -> Frame {
        Frame {
            payload: Some(value),
            ..Frame::control(id, Kind::Ok)
        }
    }

    /// The deadline a CALL received at `now` carries.
    fn deadline(&self, now: Instant) -> Option<Instant> {
        (self.budget_us != NO_DEADLINE).then(|| now + Duration::from_micros(self.budget_us.into()))
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let len = HEADER as u32 - 4 + if self.payload.is_some() { 8 } else { 0 };
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.budget_us.to_be_bytes());
        out.push(self.kind as u8);
        if let Some(p) = self.payload {
            out.extend_from_slice(&p.to_be_bytes());
        }
    }

    /// The next frame; `None` if the stream ends between frames.
    fn read(r: &mut impl BufRead) -> io::Result<Option<Frame>> {
        if r.fill_buf()?.is_empty() {
            return Ok(None);
        }
        let mut h = [0u8; HEADER];
        r.read_exact(&mut h)?;
        let len = u32::from_be_bytes(h[0..4].try_into().unwrap());
        let id = u64::from_be_bytes(h[4..12].try_into().unwrap());
        let budget_us = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let kind = match h[16] {
            1 => Kind::Call,
            2 => Kind::Cancel,
            3 => Kind::Ok,
            4 => Kind::Expired,
            5 => Kind::Cancelled,
            k => return Err(bad_frame(format!("unknown kind {k}"))),
        };
        let has_payload = matches!(kind, Kind::Call | Kind::Ok);
        if len != (HEADER as u32 - 4) + if has_payload { 8 } else { 0 } {
            return Err(bad_frame(format!("{kind:?} frame of length {len}")));
        }
        let payload = if has_payload {
            let mut p = [0u8; 8];
            r.read_exact(&mut p)?;
            Some(u64::from_be_bytes(p))
        } else {
            None
        };
        Ok(Some(Frame {
            id,
            budget_us,
            kind,
            payload,
        }))
    }
}

/// The time left before `deadline` in µs, rounded up, so that the server's
/// deadline is never earlier than the caller's.
fn budget(deadline: Option<Instant>) -> u32 {
    let Some(d) = deadline else {
        return NO_DEADLINE;
    };
    let left = d.saturating_duration_since(Instant::now()).as_nanos();
    left.div_ceil(1000).min(u128::from(NO_DEADLINE - 1)) as u32
}

fn bad_frame(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

// ──────────────────────────────────────────────── what the servers compute

/// One request in `FANOUT_ONE_IN` also needs the backend.
const FANOUT_ONE_IN: u64 = 4;
/// How long the front waits for the backend before it hedges.
const HEDGE_AFTER: Duration = Duration::from_millis(5);
/// Connections from the front server to the backend.
const BACKEND_CONNS: usize = 2;
/// How long servers and pools get to drain at the end before what is left
/// is stopped (every request in flight ends by its deadline well before).
const DRAIN: Duration = Duration::from_secs(2);

fn needs_backend(key: u64) -> bool {
    key % FANOUT_ONE_IN == 0
}

/// The backend's answer for `key`.
fn backend_value(key: u64) -> u64 {
    mix(key ^ 0xbac4_e0d0)
}

/// The front server's own part of the answer.
fn front_value(key: u64) -> u64 {
    mix(key ^ 0xf0_0d)
}

/// What a caller must get back for `key`.
fn expected(key: u64) -> u64 {
    if needs_backend(key) {
        front_value(key) ^ backend_value(key)
    } else {
        front_value(key)
    }
}

/// splitmix64's finalizer: a cheap, well-mixed function of `x`.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// xorshift64*: a small seeded generator, one per task.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(mix(seed) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// A heavy-tailed service time: most requests are answered at once, one in
/// `slow_one_in` waits `scale / u^(1/alpha)` (a Pareto draw: the smaller
/// `alpha`, the heavier the tail), at most `cap`.
#[derive(Debug)]
struct Service {
    slow_one_in: u64,
    scale: Duration,
    alpha: f64,
    cap: Duration,
}

impl Service {
    fn draw(&self, rng: &mut Rng) -> Option<Duration> {
        if rng.next() % self.slow_one_in != 0 {
            return None;
        }
        let t = self.scale.as_secs_f64() / rng.unit().powf(1.0 / self.alpha);
        Some(Duration::from_secs_f64(t).min(self.cap))
    }
}

/// The front: one in 10 requests waits; half of those 150 µs or less, one
/// in 1 000 of them 10 ms or more.
const FRONT_SERVICE: Service = Service {
    slow_one_in: 10,
    scale: Duration::from_micros(100),
    alpha: 1.5,
    cap: Duration::from_millis(100),
};

/// The backend: one in 5 waits, with a heavier tail (which the hedge cuts).
const BACKEND_SERVICE: Service = Service {
    slow_one_in: 5,
    scale: Duration::from_micros(200),
    alpha: 1.2,
    cap: Duration::from_millis(100),
};

// ─────────────────────────────────────────────── the client side: a pool

/// A reply as its caller gets it.
#[derive(Debug)]
struct Answer {
    kind: Kind,
    value: u64,
    /// When the connection's reader read it.
    arrived: Instant,
}

/// Why a call got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallError {
    /// The deadline of the caller's scope passed first.
    DeadlineExceeded,
    /// The caller was interrupted or stopped; the server was told.
    Cancelled,
    /// The connection failed.
    Closed,
}

/// Calls waiting for their reply, by id. Only the reply takes an entry
/// out: a caller that gives up leaves it, and its reply (every call gets
/// one) is then dropped.
type Pending = Mutex<HashMap<u64, oneshot::Sender<Answer>>>;

/// Connections to one server, shared by many callers. Each connection has
/// a writer task (frames from callers, through a channel, batched into one
/// write) and a reader task (replies, handed to their callers by id).
/// Dropping the pool closes the connections once their frames are written.
struct Pool {
    conns: Vec<PoolConn>,
    next_conn: AtomicUsize,
    next_id: AtomicU64,
    stats: Arc<PoolStats>,
}

#[derive(Debug)]
struct PoolConn {
    frames: mpsc::Sender<Frame>,
    pending: Arc<Pending>,
}

/// A pool's counts.
#[derive(Debug, Default)]
struct PoolStats {
    /// Calls written to a connection.
    sent: AtomicU64,
    /// CANCEL frames written.
    cancels: AtomicU64,
    /// Replies read.
    replies: AtomicU64,
    /// Replies whose id named no call in flight (must stay 0).
    unknown: AtomicU64,
    /// Calls still waiting when their connection closed (must stay 0).
    unanswered: AtomicU64,
    /// Connections that failed (must stay 0).
    errors: AtomicU64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("conns", &self.conns.len())
            .finish_non_exhaustive()
    }
}

/// A pool's tasks, two per connection, joined once the pool is dropped.
type PoolTasks = JoinSet<io::Result<()>>;

impl Pool {
    /// Opens `n` connections to `addr`; their tasks go into `tasks`.
    fn connect(name: &str, addr: SocketAddr, n: usize, tasks: &mut PoolTasks) -> io::Result<Pool> {
        let stats = Arc::new(PoolStats::default());
        let mut conns = Vec::with_capacity(n);
        for i in 0..n {
            let stream = Arc::new(TcpStream::connect(addr)?);
            stream.set_nodelay(true)?;
            let (frames, outbox) = mpsc::channel();
            let pending = Arc::new(Pending::default());
            let s = stream.clone();
            let writer = task::Builder::new().name(format!("{name} conn {i} writer"));
            tasks.spawn_with(writer, move || write_frames(&s, outbox))?;
            let (p, st) = (pending.clone(), stats.clone());
            let reader = task::Builder::new().name(format!("{name} conn {i} reader"));
            tasks.spawn_with(reader, move || read_replies(&stream, &p, &st))?;
            conns.push(PoolConn { frames, pending });
        }
        Ok(Pool {
            conns,
            next_conn: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            stats,
        })
    }

    /// One call: write the request, wait for its reply. No timeout here:
    /// the caller's deadline scope bounds every wait, and travels in the
    /// request.
    fn call(&self, key: u64) -> Result<Answer, CallError> {
        if spindle::is_stopped() {
            return Err(CallError::Cancelled);
        }
        let conn = &self.conns[self.next_conn.fetch_add(1, Relaxed) % self.conns.len()];
        let id = self.next_id.fetch_add(1, Relaxed);
        let (reply, mut answer) = oneshot::channel();
        // Waits only while the reader holds the lock; the deadline ends it.
        let mut pending = conn
            .pending
            .lock()
            .map_err(|_| CallError::DeadlineExceeded)?;
        pending.insert(id, reply);
        drop(pending);
        if conn
            .frames
            .send(Frame::call(id, key, spindle::current_deadline()))
            .is_err()
        {
            return Err(CallError::Closed); // the writer has gone
        }
        self.stats.sent.fetch_add(1, Relaxed);
        match answer.recv() {
            Ok(a) => Ok(a),
            Err(e) if e.is_deadline_exceeded() => Err(CallError::DeadlineExceeded),
            Err(e) if e.is_disconnected() => Err(CallError::Closed),
            // Interrupted or stopped: tell the server to drop the work.
            Err(_) => {
                if conn.frames.send(Frame::control(id, Kind::Cancel)).is_ok() {
                    self.stats.cancels.fetch_add(1, Relaxed);
                }
                Err(CallError::Cancelled)
            }
        }
    }
}

/// Waits for a pool's tasks once the pool is dropped: its writers close
/// their sides, the server closes its own once every call is answered, and
/// that ends the readers. A task that failed or had to be stopped counts as
/// an error.
fn close_pool(tasks: &mut PoolTasks, stats: &PoolStats) {
    let stopped = drain(tasks, |r| {
        if !matches!(r, Ok(Ok(()))) {
            stats.errors.fetch_add(1, Relaxed);
        }
    });
    stats.errors.fetch_add(stopped, Relaxed);
}

/// A connection's writer: sends the frames queued for it, as many as are
/// waiting in one write; closes its side once every sender has gone.
fn write_frames(stream: &TcpStream, outbox: mpsc::Receiver<Frame>) -> io::Result<()> {
    let mut buf = Vec::with_capacity(16 << 10);
    while let Ok(first) = outbox.recv() {
        buf.clear();
        first.encode(&mut buf);
        for f in outbox.try_iter().take(512) {
            f.encode(&mut buf);
        }
        let mut w = stream;
        w.write_all(&buf)?;
    }
    stream.shutdown(Shutdown::Write)
}

/// A pool connection's reader: hands each reply to its caller, until the
/// server closes the connection.
fn read_replies(stream: &TcpStream, pending: &Pending, stats: &PoolStats) -> io::Result<()> {
    let r = read_replies_until_closed(stream, pending, stats);
    let left = pending.lock().expect("no deadline here").len();
    stats.unanswered.fetch_add(left as u64, Relaxed);
    r
}

fn read_replies_until_closed(
    stream: &TcpStream,
    pending: &Pending,
    stats: &PoolStats,
) -> io::Result<()> {
    let mut r = BufReader::with_capacity(64 << 10, stream);
    while let Some(f) = Frame::read(&mut r)? {
        let arrived = Instant::now();
        stats.replies.fetch_add(1, Relaxed);
        if !matches!(f.kind, Kind::Ok | Kind::Expired | Kind::Cancelled) {
            return Err(bad_frame(format!("a server sent {:?}", f.kind)));
        }
        let caller = pending.lock().expect("no deadline here").remove(&f.id);
        match caller {
            // A caller that has given up has dropped its receiver: then
            // nobody reads this, as it should be.
            Some(reply) => {
                let _ = reply.send(Answer {
                    kind: f.kind,
                    value: f.payload.unwrap_or(0),
                    arrived,
                });
            }
            None => {
                stats.unknown.fetch_add(1, Relaxed);
            }
        }
    }
    Ok(())
}

// ──────────────────────────────────────────────────────────── the servers

/// One server's counts.
#[derive(Debug, Default)]
struct ServerStats {
    /// CALL and CANCEL frames received.
    calls: AtomicU64,
    cancels: AtomicU64,
    /// Replies, by kind.
    ok: AtomicU64,
    expired: AtomicU64,
    cancelled: AtomicU64,
    /// Dropped because the deadline had passed on arrival.
    dropped_before: AtomicU64,
    /// Dropped because the deadline passed during the work.
    dropped_during: AtomicU64,
    /// Requests that waited (a slow one).
    sleeps: AtomicU64,
    /// Requests that asked the backend, hedges sent, hedges that won,
    /// attempts stopped because the other won.
    fanouts: AtomicU64,
    hedges: AtomicU64,
    hedge_wins: AtomicU64,
    losers_stopped: AtomicU64,
    /// CANCEL frames for a request that had already ended.
    cancels_late: AtomicU64,
    /// Must stay 0: the backend failed, a handler panicked, a connection
    /// failed or had to be stopped at shutdown.
    backend_errors: AtomicU64,
    panics: AtomicU64,
    conn_errors: AtomicU64,
    conns_stopped: AtomicU64,
}

/// What a server's request handlers share.
#[derive(Debug)]
struct Ctx {
    name: &'static str,
    service: &'static Service,
    /// Its own part of each answer.
    value: fn(u64) -> u64,
    /// The backend, for the front server.
    backend: Option<Arc<Pool>>,
    stats: Arc<ServerStats>,
}

/// A running server: its address, and how to stop it.
#[derive(Debug)]
struct Server {
    addr: SocketAddr,
    shutdown: mpsc::Sender<()>,
    task: spindle::JoinHandle<()>,
}

impl Server {
    /// Listens on a port of loopback and serves from an accept task.
    /// `backend_tasks`: the tasks of `ctx.backend`, closed after the last
    /// request.
    fn start(ctx: Ctx, backend_tasks: Option<PoolTasks>) -> io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (shutdown, stop) = mpsc::channel();
        let name = format!("{} accept", ctx.name);
        let task = task::Builder::new()
            .name(name)
            .spawn(move || accept_loop(listener, Arc::new(ctx), stop, backend_tasks))?;
        Ok(Server {
            addr,
            shutdown,
            task,
        })
    }

    /// Stops accepting, lets the connections drain, and waits for it all.
    fn stop(self) {
        let _ = self.shutdown.send(());
        let _ = self.task.join();
    }
}

/// Accepts connections until told to stop (a message on `stop`, or its
/// sender gone), a task for each in a `JoinSet`; then drains them.
fn accept_loop(
    listener: TcpListener,
    ctx: Arc<Ctx>,
    stop: mpsc::Receiver<()>,
    backend_tasks: Option<PoolTasks>,
) {
    let mut conns = JoinSet::new();
    loop {
        // Wait for a connection or the word to stop, whichever comes first.
        let mut sel = Select::new();
        let accept = sel.readable(listener.as_fd());
        sel.recv(&stop);
        let chosen = sel.select().map(|op| op.index());
        drop(sel);
        if chosen != Ok(accept) {
            break;
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                let c = ctx.clone();
                let named = task::Builder::new().name(format!("{} conn {peer}", ctx.name));
                if let Err(e) = conns.spawn_with(named, move || serve_conn(stream, c)) {
                    eprintln!("rpc: {}: cannot spawn a connection's task: {e}", ctx.name);
                }
            }
            Err(e) => {
                eprintln!("rpc: {}: accept: {e}", ctx.name);
                let _ = spindle::sleep(Duration::from_millis(10));
            }
        }
        while let Some((_, r)) = conns.try_join_next() {
            conn_ended(&ctx.stats, r);
        }
    }
    drop(listener);
    // Connections end when their clients close them, after each request in
    // flight has been answered; those still open after DRAIN are stopped.
    let stopped = drain(&mut conns, |r| conn_ended(&ctx.stats, r));
    ctx.stats.conns_stopped.fetch_add(stopped, Relaxed);
    // The last request has been answered: close the pool to the backend.
    if let (Some(mut tasks), Some(pool)) = (backend_tasks, ctx.backend.as_ref()) {
        let stats = pool.stats.clone();
        drop(ctx);
        close_pool(&mut tasks, &stats);
    }
}

fn conn_ended(stats: &ServerStats, r: Result<io::Result<()>, JoinError>) {
    if !matches!(r, Ok(Ok(()))) {
        stats.conn_errors.fetch_add(1, Relaxed);
    }
}

/// Joins every task of `set`, each as it ends, for at most DRAIN; then
/// stops those left and joins them too. How many it had to stop.
fn drain<T: Send + 'static>(
    set: &mut JoinSet<T>,
    mut ended: impl FnMut(Result<T, JoinError>),
) -> u64 {
    let drained = spindle::with_deadline(Instant::now() + DRAIN, || loop {
        match set.join_next() {
            Ok(Some((_, r))) => ended(r),
            Ok(None) => return true,
            Err(_) => return false,
        }
    });
    if drained {
        return 0;
    }
    let stopped = set.len() as u64;
    set.stop_all();
    while let Ok(Some((_, r))) = set.join_next() {
        ended(r);
    }
    stopped
}

/// One connection: this task reads requests and starts a task for each;
/// a writer task sends the replies. Ends when the client closes its side
/// and every request has been answered.
fn serve_conn(stream: TcpStream, ctx: Arc<Ctx>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let (replies, outbox) = mpsc::channel();
    spindle::scope(|s| {
        let writer = task::Builder::new()
            .name(format!("{} conn writer", ctx.name))
            .spawn_scoped(s, || write_frames(&stream, outbox))?;
        let read = read_requests(&stream, replies, &ctx);
        // `replies` is gone with the last request: the writer finishes.
        let written = writer.join().unwrap_or_else(|e| Err(io::Error::other(e)));
        read.and(written)
    })
}

/// Reads requests until the client closes, a task for each in a
/// `JoinSet`; a CANCEL stops the request's task. Then waits for the
/// requests in flight.
fn read_requests(
    stream: &TcpStream,
    replies: mpsc::Sender<Frame>,
    ctx: &Arc<Ctx>,
) -> io::Result<()> {
    let mut requests: JoinSet<u64> = JoinSet::new();
    let mut in_flight: HashMap<u64, TaskId> = HashMap::new();
    let mut r = BufReader::with_capacity(64 << 10, stream);
    let result = loop {
        let f = match Frame::read(&mut r) {
            Ok(Some(f)) => f,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        match f.kind {
            Kind::Call => {
                ctx.stats.calls.fetch_add(1, Relaxed);
                let deadline = f.deadline(Instant::now());
                let (c, out) = (ctx.clone(), replies.clone());
                let key = f.payload.unwrap_or(0);
                // The request's task runs in its deadline scope: every wait
                // in it, and in the tasks it spawns, ends when it passes.
                let named = task::Builder::new()
                    .name(format!("{} request {}", ctx.name, f.id))
                    .deadline(deadline);
                let id = f.id;
                let spawned = requests.spawn_with(named, move || {
                    let _ = out.send(handle(id, key, deadline, &c));
                    id
                });
                match spawned {
                    Ok(task) => {
                        in_flight.insert(f.id, task);
                    }
                    Err(e) => break Err(e),
                }
            }
            Kind::Cancel => {
                ctx.stats.cancels.fetch_add(1, Relaxed);
                match in_flight.get(&f.id) {
                    // Its children (the backend attempts) are stopped with it.
                    Some(&task) => {
                        let _ = spindle::stop(task);
                    }
                    None => {
                        ctx.stats.cancels_late.fetch_add(1, Relaxed);
                    }
                }
            }
            other => break Err(bad_frame(format!("a client sent {other:?}"))),
        }
        while let Some((_, r)) = requests.try_join_next() {
            request_ended(ctx, &mut in_flight, r);
        }
    };
    while let Ok(Some((_, r))) = requests.join_next() {
        request_ended(ctx, &mut in_flight, r);
    }
    result
}

fn request_ended(ctx: &Ctx, in_flight: &mut HashMap<u64, TaskId>, r: Result<u64, JoinError>) {
    match r {
        Ok(id) => {
            in_flight.remove(&id);
        }
        Err(e) => {
            eprintln!("rpc: {}: a request's task: {e}", ctx.name);
            ctx.stats.panics.fetch_add(1, Relaxed);
        }
    }
}

/// Why a request got no answer.
enum Dropped {
    /// Its deadline passed.
    Deadline,
    /// It was stopped (the caller cancelled it).
    Stopped,
    /// The backend failed.
    Backend,
}

impl From<SleepError> for Dropped {
    fn from(e: SleepError) -> Dropped {
        match e {
            SleepError::DeadlineExceeded => Dropped::Deadline,
            _ => Dropped::Stopped, // interrupted or stopped
        }
    }
}

/// Serves one request, in its own task, under its deadline; the reply.
fn handle(id: u64, key: u64, deadline: Option<Instant>, ctx: &Ctx) -> Frame {
    let stats = &ctx.stats;
    let passed = || deadline.is_some_and(|d| Instant::now() >= d);
    if passed() {
        stats.dropped_before.fetch_add(1, Relaxed);
        stats.expired.fetch_add(1, Relaxed);
        return Frame::control(id, Kind::Expired);
    }
    let work = || -> Result<u64, Dropped> {
        let mut rng = Rng::new(id ^ key);
        if let Some(t) = ctx.service.draw(&mut rng) {
            stats.sleeps.fetch_add(1, Relaxed);
            spindle::sleep(t)?;
        }
        let mut value = (ctx.value)(key);
        if let Some(backend) = ctx.backend.as_ref().filter(|_| needs_backend(key)) {
            value ^= ask_backend(backend, key, stats)?;
        }
        Ok(value)
    };
    match work() {
        Ok(value) if !passed() => {
            stats.ok.fetch_add(1, Relaxed);
            Frame::ok(id, value)
        }
        Err(Dropped::Stopped) => {
            stats.cancelled.fetch_add(1, Relaxed);
            Frame::control(id, Kind::Cancelled)
        }
        // Cut short by the deadline, or done after it (nobody waits then).
        other => {
            let why = match other {
                Err(Dropped::Backend) => &stats.backend_errors,
                _ => &stats.dropped_during,
            };
            why.fetch_add(1, Relaxed);
            stats.expired.fetch_add(1, Relaxed);
            Frame::control(id, Kind::Expired)
        }
    }
}

/// Asks the backend for `key`, hedged: if no answer is in by HEDGE_AFTER,
/// a second attempt goes out; the first answer wins and the other attempt
/// is stopped (it tells the backend to drop the work). The attempts are
/// children of the request's task: they run under its deadline, and a stop
/// of the request stops them.
fn ask_backend(backend: &Arc<Pool>, key: u64, stats: &ServerStats) -> Result<u64, Dropped> {
    stats.fanouts.fetch_add(1, Relaxed);
    let mut attempts = JoinSet::new();
    let attempt = |attempts: &mut JoinSet<_>| {
        let pool = backend.clone();
        attempts.spawn(move || pool.call(key))
    };
    attempt(&mut attempts);
    let hedge_at = Instant::now() + HEDGE_AFTER;
    let room_to_hedge = spindle::current_deadline().is_none_or(|d| d > hedge_at);
    let mut hedge = None;
    let first = if room_to_hedge {
        match spindle::with_deadline(hedge_at, || attempts.join_next()) {
            // The inner scope's deadline (the request's is later): hedge.
            Err(WaitError::DeadlineExceeded) => {
                stats.hedges.fetch_add(1, Relaxed);
                hedge = Some(attempt(&mut attempts));
                attempts.join_next()
            }
            other => other,
        }
    } else {
        attempts.join_next()
    };
    let (winner, answer) = match first {
        Ok(Some((winner, Ok(answer)))) => (winner, answer),
        Ok(Some((_, Err(_)))) | Ok(None) => return Err(Dropped::Backend),
        Err(WaitError::DeadlineExceeded) => return Err(Dropped::Deadline),
        Err(_) => return Err(Dropped::Stopped),
    };
    if hedge == Some(winner) {
        stats.hedge_wins.fetch_add(1, Relaxed);
    }
    // The loser, if still running, is stopped (dropping the set would too).
    stats
        .losers_stopped
        .fetch_add(attempts.len() as u64, Relaxed);
    attempts.stop_all();
    match answer {
        Ok(Answer {
            kind: Kind::Ok,
            value,
            ..
        }) => Ok(value),
        Ok(Answer {
            kind: Kind::Expired,
            ..
        })
        | Err(CallError::DeadlineExceeded) => Err(Dropped::Deadline),
        Err(CallError::Cancelled) => Err(Dropped::Stopped),
        Ok(_) | Err(CallError::Closed) => Err(Dropped::Backend),
    }
}

// ──────────────────────────────────────────────────────────── the callers

/// The callers' counts, shared with the live line.
#[derive(Debug, Default)]
struct CallerStats {
    calls: AtomicU64,
    ok: AtomicU64,
    /// The deadline passed first, or the answer came after it, or the
    /// server answered EXPIRED.
    timeouts: AtomicU64,
    /// Of the timeouts: an OK answer that arrived after the deadline, which
    /// the caller's wait still saw (its timer had not woken it yet).
    late: AtomicU64,
    cancelled: AtomicU64,
    /// Sent by the canceller.
    interrupts: AtomicU64,
}

impl CallerStats {
    fn ended(&self) -> u64 {
        self.ok.load(Relaxed) + self.timeouts.load(Relaxed) + self.cancelled.load(Relaxed)
    }
}

/// What a caller hands back: the latencies of its successes (ns) and what
/// it saw go wrong.
#[derive(Debug, Default)]
struct CallerReport {
    latencies: Vec<u64>,
    broken: Vec<String>,
}

/// Makes calls back to back while `running`; `busy` says when it is in
/// one (for the canceller).
fn caller(
    n: usize,
    pool: &Pool,
    deadline: Duration,
    running: &AtomicBool,
    busy: &AtomicBool,
    stats: &CallerStats,
) -> CallerReport {
    let mut report = CallerReport::default();
    let mut rng = Rng::new(n as u64);
    while running.load(Relaxed) {
        let key = rng.next();
        stats.calls.fetch_add(1, Relaxed);
        let start = Instant::now();
        let until = start + deadline;
        busy.store(true, Relaxed);
        let result = spindle::with_deadline(until, || pool.call(key));
        busy.store(false, Relaxed);
        let now = Instant::now();
        let problem = match result {
            Ok(a) if a.kind == Kind::Ok && a.value != expected(key) => Some(format!(
                "answered {:#x}, expected {:#x}",
                a.value,
                expected(key)
            )),
            Ok(a) if a.kind == Kind::Ok && a.arrived <= until => {
                stats.ok.fetch_add(1, Relaxed);
                report.latencies.push((now - start).as_nanos() as u64);
                None
            }
            Ok(a) if a.kind == Kind::Ok => {
                stats.late.fetch_add(1, Relaxed);
                stats.timeouts.fetch_add(1, Relaxed);
                None
            }
            Ok(a) if a.kind == Kind::Expired && a.arrived < until => Some(format!(
                "EXPIRED {:?} before its deadline",
                until - a.arrived
            )),
            Ok(a) if a.kind == Kind::Expired => {
                stats.timeouts.fetch_add(1, Relaxed);
                None
            }
            Ok(a) => Some(format!("a {:?} reply to a call still waiting", a.kind)),
            Err(CallError::DeadlineExceeded) if now < until => {
                Some(format!("timed out {:?} before its deadline", until - now))
            }
            Err(CallError::DeadlineExceeded) => {
                stats.timeouts.fetch_add(1, Relaxed);
                None
            }
            Err(CallError::Cancelled) => {
                stats.cancelled.fetch_add(1, Relaxed);
                None
            }
            Err(CallError::Closed) => Some("its connection closed".into()),
        };
        if let Some(p) = problem {
            report.broken.push(format!("call for key {key:#x}: {p}"));
        }
    }
    report
}

/// Interrupts a caller in a call every few ms, as users who give up.
fn canceller(callers: &[TaskId], busy: &[AtomicBool], running: &AtomicBool, stats: &CallerStats) {
    let mut rng = Rng::new(0xca_9ce1);
    while running.load(Relaxed) {
        if spindle::sleep(Duration::from_micros(1000 + rng.next() % 8000)).is_err() {
            return;
        }
        let i = (rng.next() % callers.len() as u64) as usize;
        if busy[i].load(Relaxed) && spindle::interrupt(callers[i]).is_ok() {
            stats.interrupts.fetch_add(1, Relaxed);
        }
    }
}

// ──────────────────────────────────────────────────────────────── the run

#[derive(Debug)]
struct Args {
    conns: usize,
    concurrency: usize,
    deadline: Duration,
    duration: Duration,
    workers: Option<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        conns: 4,
        concurrency: 64,
        deadline: Duration::from_millis(20),
        duration: Duration::from_secs(5),
        workers: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| match v.parse::<u64>() {
            Ok(0) => Err(format!("{flag} must be positive")),
            Ok(n) => Ok(n),
            Err(e) => Err(format!("{flag}: {e}")),
        };
        match flag.as_str() {
            "--conns" => args.conns = number(value()?)? as usize,
            "--concurrency" => args.concurrency = number(value()?)? as usize,
            "--deadline-ms" => args.deadline = Duration::from_millis(number(value()?)?),
            "--duration" => {
                let v = value()?;
                let secs = v.parse::<f64>().map_err(|e| format!("--duration: {e}"))?;
                args.duration =
                    Duration::try_from_secs_f64(secs).map_err(|e| format!("--duration: {e}"))?;
            }
            "--workers" => args.workers = Some(number(value()?)? as usize),
            "--quick" => args.duration = Duration::from_secs(1),
            other => {
                return Err(format!(
                    "unknown option {other} (see the top of examples/examples/rpc.rs)"
                ))
            }
        }
    }
    Ok(args)
}

/// Everything the run counted, for the summary.
#[derive(Debug)]
struct Outcome {
    elapsed: Duration,
    signalled: bool,
    callers: Arc<CallerStats>,
    reports: Vec<CallerReport>,
    client_pool: Arc<PoolStats>,
    backend_pool: Arc<PoolStats>,
    front: Arc<ServerStats>,
    backend: Arc<ServerStats>,
    runtime: spindle::RuntimeStats,
}

fn main() {
    spindle_examples::init_tracing();
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("rpc: {e}");
        std::process::exit(2);
    });
    // A dump of every task on SIGQUIT (Ctrl-\).
    let mut builder = spindle::Runtime::builder().dump_on_signal(libc::SIGQUIT);
    if let Some(n) = args.workers {
        builder = builder.workers(n);
    }
    let rt = builder.build().expect("start the runtime");
    // The timer thread is the process's: it counts every timed wait.
    let timer = spindle_timer::TimerThread::global();
    let timer_before = timer.stats();
    let workers = rt.workers();
    let outcome = rt.block_on(|| run(&args, workers));
    let timer_stats = timer.stats();
    match outcome {
        Ok(o) => {
            let broken = summary(&args, workers, &o, timer_before, timer_stats);
            if broken {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("rpc: {e}");
            std::process::exit(1);
        }
    }
}

/// Starts the backend, the front server and the callers; reports while
/// they run; then shuts it all down in order: callers, their connections,
/// the front server (and its connections to the backend), the backend.
fn run(args: &Args, workers: usize) -> io::Result<Outcome> {
    // Ctrl-C and SIGTERM arrive as a message, selected beside the clock.
    let (signalled_tx, signalled) = mpsc::channel::<i32>();
    let signals = spindle::signal::Signals::new(&[libc::SIGINT, libc::SIGTERM])?;
    // Kept, so that the channel stays open if the watcher ends early.
    let _keep_open = signalled_tx.clone();
    let watcher = task::Builder::new().name("signal watcher").spawn(move || {
        if let Ok(sig) = signals.recv() {
            let _ = signalled_tx.send(sig);
        }
    })?;

    let backend_stats = Arc::new(ServerStats::default());
    let backend = Server::start(
        Ctx {
            name: "backend",
            service: &BACKEND_SERVICE,
            value: backend_value,
            backend: None,
            stats: backend_stats.clone(),
        },
        None,
    )?;
    let mut backend_tasks = JoinSet::new();
    let backend_pool = Pool::connect(
        "front→backend",
        backend.addr,
        BACKEND_CONNS,
        &mut backend_tasks,
    )?;
    let backend_pool_stats = backend_pool.stats.clone();
    let front_stats = Arc::new(ServerStats::default());
    let front = Server::start(
        Ctx {
            name: "front",
            service: &FRONT_SERVICE,
            value: front_value,
            backend: Some(Arc::new(backend_pool)),
            stats: front_stats.clone(),
        },
        Some(backend_tasks),
    )?;
    let mut client_tasks = JoinSet::new();
    let pool = Arc::new(Pool::connect(
        "client",
        front.addr,
        args.conns,
        &mut client_tasks,
    )?);
    let client_pool_stats = pool.stats.clone();

    // The callers, and the canceller that interrupts a few of their calls.
    let stats = Arc::new(CallerStats::default());
    let running = Arc::new(AtomicBool::new(true));
    let busy: Arc<[AtomicBool]> = (0..args.concurrency)
        .map(|_| AtomicBool::new(false))
        .collect();
    let mut callers = JoinSet::new();
    let mut ids = Vec::with_capacity(args.concurrency);
    for n in 0..args.concurrency {
        let (pool, running, busy, stats) =
            (pool.clone(), running.clone(), busy.clone(), stats.clone());
        let deadline = args.deadline;
        let named = task::Builder::new().name(format!("caller {n}"));
        ids.push(callers.spawn_with(named, move || {
            caller(n, &pool, deadline, &running, &busy[n], &stats)
        })?);
    }
    let canceller = {
        let (running, busy, stats) = (running.clone(), busy.clone(), stats.clone());
        task::Builder::new()
            .name("canceller")
            .spawn(move || canceller(&ids, &busy, &running, &stats))?
    };

    // Report while it runs, until the duration is up or a signal comes.
    let start = Instant::now();
    let signalled = live(&stats, start, start + args.duration, workers, &signalled);
    let elapsed = start.elapsed();

    // Shut down, in order. The callers finish the call they are in.
    running.store(false, Relaxed);
    let _ = canceller.stop();
    let _ = canceller.join();
    let mut reports = Vec::with_capacity(args.concurrency);
    while let Some((_, r)) = callers.join_next().unwrap_or(None) {
        match r {
            Ok(report) => reports.push(report),
            Err(e) => reports.push(CallerReport {
                broken: vec![format!("a caller's task: {e}")],
                ..CallerReport::default()
            }),
        }
    }
    // The callers' pool goes: its connections close once every call in
    // flight is answered; then the front server's (to the backend) do.
    drop(pool);
    close_pool(&mut client_tasks, &client_pool_stats);
    front.stop();
    backend.stop();
    let _ = watcher.stop();
    let _ = watcher.join();
    Ok(Outcome {
        elapsed,
        signalled,
        callers: stats,
        reports,
        client_pool: client_pool_stats,
        backend_pool: backend_pool_stats,
        front: front_stats,
        backend: backend_stats,
        runtime: spindle::Handle::current().stats(),
    })
}

/// The live line, until `end` or a signal (then true).
fn live(
    stats: &CallerStats,
    start: Instant,
    end: Instant,
    workers: usize,
    signalled: &mpsc::Receiver<i32>,
) -> bool {
    // SAFETY: isatty reads no memory of ours; any fd number is allowed.
    let tty = unsafe { libc::isatty(1) } == 1;
    let every = if tty {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(1)
    };
    let handle = spindle::Handle::current();
    let mut last = (start, 0u64, vec![Duration::ZERO; workers]);
    let mut tick = start;
    loop {
        tick = (tick + every).min(end);
        let stop = spindle::select! {
            recv(*signalled) -> sig => sig.is_ok(),
            deadline(tick) => false,
        };
        if stop {
            if tty {
                println!();
            }
            eprintln!("rpc: signal: shutting down");
            return true;
        }
        let now = Instant::now();
        let ended = stats.ended();
        let rt = handle.stats();
        let span = now - last.0;
        let mut line = format!(
            "{:>5.1}s  {ended:>9} calls {:>8.0}/s  {} timeouts  {} cancelled  {} tasks  workers",
            (now - start).as_secs_f64(),
            (ended - last.1) as f64 / span.as_secs_f64(),
            stats.timeouts.load(Relaxed),
            stats.cancelled.load(Relaxed),
            rt.tasks,
        );
        for (w, before) in rt.workers().iter().zip(&mut last.2) {
            let busy = (w.busy - *before).as_secs_f64() / span.as_secs_f64();
            let _ = write!(line, " {:>3.0}%", (busy * 100.0).min(100.0));
            *before = w.busy;
        }
        if tty {
            print!("\r{line}\x1b[K");
            let _ = io::stdout().flush();
        } else {
            println!("{line}");
        }
        (last.0, last.1) = (now, ended);
        if now >= end {
            if tty {
                println!();
            }
            return false;
        }
    }
}

// ──────────────────────────────────────────────────────────── the summary

/// Prints what the run did and checks its invariants; whether one broke.
fn summary(
    args: &Args,
    workers: usize,
    o: &Outcome,
    timer_before: spindle_timer::TimerStats,
    timer: spindle_timer::TimerStats,
) -> bool {
    let c = &o.callers;
    let load = |a: &AtomicU64| a.load(Relaxed);
    let (calls, ok, timeouts, cancelled) = (
        load(&c.calls),
        load(&c.ok),
        load(&c.timeouts),
        load(&c.cancelled),
    );
    let mut latencies: Vec<u64> = o
        .reports
        .iter()
        .flat_map(|r| r.latencies.iter().copied())
        .collect();
    latencies.sort_unstable();
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1));
        Duration::from_nanos(latencies.get(i).copied().unwrap_or(0))
    };
    let secs = o.elapsed.as_secs_f64();

    println!(
        "spindle rpc: {:.1} s{}, {workers} workers, {} connections, {} callers, deadline {:?}",
        secs,
        if o.signalled {
            " (stopped by a signal)"
        } else {
            ""
        },
        args.conns,
        args.concurrency,
        args.deadline,
    );
    println!(
        "  calls       {calls} ({:.0}/s): {ok} ok, {timeouts} timed out ({} answered after the deadline), {cancelled} cancelled",
        calls as f64 / secs,
        load(&c.late),
    );
    println!(
        "  latency     p50 {:.1?}  p99 {:.1?}  p999 {:.1?}  max {:.1?}",
        pct(0.50),
        pct(0.99),
        pct(0.999),
        pct(1.0),
    );
    for (name, s) in [("front", &o.front), ("backend", &o.backend)] {
        println!(
            "  {name:<10}  {} requests: {} ok, {} dropped past their deadline ({} before starting, {} while running), \
             {} cancelled ({} CANCELs, {} of them after the answer)",
            load(&s.calls),
            load(&s.ok),
            load(&s.expired),
            load(&s.dropped_before),
            load(&s.dropped_during),
            load(&s.cancelled),
            load(&s.cancels),
            load(&s.cancels_late),
        );
    }
    let f = &o.front;
    println!(
        "  fan-out     {} requests asked the backend; {} hedged after {HEDGE_AFTER:?}, the hedge won {}; {} losing attempts stopped",
        load(&f.fanouts),
        load(&f.hedges),
        load(&f.hedge_wins),
        load(&f.losers_stopped),
    );
    // The timer thread's own counts (process-wide: every timed wait of
    // every task arms one). A sleep and a hedge's delay are meant to fire;
    // a call's deadline is meant to be cancelled by its answer.
    let armed = timer.scheduled - timer_before.scheduled;
    let cancelled_timers = timer.unscheduled - timer_before.unscheduled;
    let fired = timer.triggered - timer_before.triggered;
    println!(
        "  timer       {armed} armed, {cancelled_timers} cancelled before they fired ({:.1}%), {fired} fired",
        100.0 * cancelled_timers as f64 / armed.max(1) as f64,
    );
    println!(
        "              armed for the calls' deadlines, cancelled by their answers; for {} sleeps and {} hedge delays,",
        load(&o.front.sleeps) + load(&o.backend.sleeps),
        load(&o.front.hedges),
    );
    println!("              meant to fire (a worker idle when a sleep ends ends it itself, and cancels its timer)");
    println!(
        "              one timer thread: {} wake-ups, {:.1?} busy; its table: {} slots ({} KiB), sized by the peak of live timers",
        timer.wakeups - timer_before.wakeups,
        timer.busy - timer_before.busy,
        timer.slots,
        timer.slots * 64 / 1024,
    );
    let rt = &o.runtime;
    println!(
        "  runtime     {} tasks spawned, {} switches, {} steals, {} parks; busy per worker: {}",
        rt.spawned,
        rt.switches,
        rt.steals,
        rt.parks,
        rt.workers()
            .iter()
            .map(|w| format!("{:.1?}", w.busy))
            .collect::<Vec<_>>()
            .join(", "),
    );

    // The invariants.
    let mut broken: Vec<String> = o
        .reports
        .iter()
        .flat_map(|r| r.broken.iter().cloned())
        .collect();
    let mut check = |ok: bool, what: String| {
        if !ok {
            broken.push(what);
        }
    };
    let (cp, bp) = (&o.client_pool, &o.backend_pool);
    check(
        ok + timeouts + cancelled == calls,
        format!("{calls} calls, but {ok} ok + {timeouts} timeouts + {cancelled} cancelled"),
    );
    check(
        cancelled <= load(&c.interrupts),
        format!(
            "{cancelled} calls cancelled, {} interrupts sent",
            load(&c.interrupts)
        ),
    );
    for (name, p, s) in [("client", cp, &o.front), ("front→backend", bp, &o.backend)] {
        check(
            load(&p.unknown) == 0,
            format!("{name}: {} replies for no call in flight", load(&p.unknown)),
        );
        check(
            load(&p.unanswered) == 0,
            format!("{name}: {} calls never answered", load(&p.unanswered)),
        );
        check(
            load(&p.errors) == 0,
            format!("{name}: {} connections failed", load(&p.errors)),
        );
        check(
            load(&p.sent) == load(&p.replies),
            format!(
                "{name}: {} calls sent, {} replies",
                load(&p.sent),
                load(&p.replies)
            ),
        );
        check(
            load(&p.sent) == load(&s.calls) && load(&p.cancels) == load(&s.cancels),
            format!(
                "{name}: {} calls and {} cancels sent, {} and {} received",
                load(&p.sent),
                load(&p.cancels),
                load(&s.calls),
                load(&s.cancels)
            ),
        );
    }
    for (name, s) in [("front", &o.front), ("backend", &o.backend)] {
        let replied = load(&s.ok) + load(&s.expired) + load(&s.cancelled);
        check(
            replied == load(&s.calls),
            format!("{name}: {} requests, {replied} replies", load(&s.calls)),
        );
        for (what, n) in [
            ("handler panics", &s.panics),
            ("backend errors", &s.backend_errors),
            ("connection errors", &s.conn_errors),
            ("connections stopped at shutdown", &s.conns_stopped),
        ] {
            check(load(n) == 0, format!("{name}: {} {what}", load(n)));
        }
    }
    // Every task has ended but this one: nothing was left running.
    check(
        o.runtime.tasks == 1,
        format!("{} tasks alive at the end, not 1", o.runtime.tasks),
    );
    check(
        load(&f.hedge_wins) <= load(&f.hedges) && load(&f.hedges) <= load(&f.fanouts),
        "front: more hedges than fan-outs, or more hedge wins than hedges".into(),
    );
    if broken.is_empty() {
        println!(
            "  invariants  held: every reply matched a call in flight and every call got one; every answer was right; \
             each call ended one way; no success after its deadline, no timeout before it; no task left running"
        );
        false
    } else {
        println!("  invariants  BROKEN ({}):", broken.len());
        for b in broken.iter().take(20) {
            println!("    {b}");
        }
        true
    }
}
